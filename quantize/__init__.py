"""quantize: post-training INT8 quantization for CPU inference with ONNX Runtime.

from quantize import Recipe, quantize
result = quantize("model.onnx", "calib.npz", Recipe.cnn())
onnxio.save_model(result.model, "model.int8.onnx")
"""

from calibration import Entropy, MinMax, Mse, Percentile
from onnxio import InputError
from quantize.fallback import fall_back
from quantize.pipeline import QuantizeResult, keep_fp32_unless_faster, quantize
from quantize.recipe import NodeOverrides, Recipe, RunOptions, SmoothQuant
from quantize.weight_choice import choose_weights

__all__ = [
    "Entropy",
    "InputError",
    "MinMax",
    "Mse",
    "NodeOverrides",
    "Percentile",
    "QuantizeResult",
    "Recipe",
    "RunOptions",
    "SmoothQuant",
    "choose_weights",
    "fall_back",
    "keep_fp32_unless_faster",
    "quantize",
]
