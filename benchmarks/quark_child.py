"""AMD Quark's ONNX PTQ, run by the Python of its own virtualenv (`make .venv-quark/.installed`: Quark pins
older onnx and onnxruntime than this project uses), so this file imports nothing of ours.

    python benchmarks/quark_child.py FP32.onnx CALIB.npz INPUT_NAME OUT.onnx [--reduce-range]

Config: Quark's U8S8_AAWS (QDQ, uint8 asymmetric activations, int8 symmetric weights: the forms
ONNX Runtime's CPU kernels take), percentile ranges, per-channel weights, cross-layer
equalization; `--reduce-range` (7-bit weights) on a CPU whose u8s8 kernels saturate.
"""

import sys

import numpy as np
from onnxruntime.quantization.calibrate import CalibrationDataReader
from quark.onnx import ModelQuantizer
from quark.onnx.quantization.config.config import Config
from quark.onnx.quantization.config.custom_config import U8S8_AAWS_CONFIG

BATCH = 32


class Reader(CalibrationDataReader):
    def __init__(self, images: np.ndarray, name: str):
        self.batches = iter([{name: images[i : i + BATCH]} for i in range(0, len(images), BATCH)])

    def get_next(self):
        return next(self.batches, None)


def main(fp32: str, calib: str, name: str, out: str, reduce_range: bool) -> None:
    config = U8S8_AAWS_CONFIG
    config.per_channel, config.include_cle, config.reduce_range = True, True, reduce_range
    with np.load(calib) as data:
        images = data[data.files[0]]
    ModelQuantizer(Config(global_quant_config=config)).quantize_model(
        fp32, out, Reader(images, name)
    )


if __name__ == "__main__":
    main(*sys.argv[1:5], reduce_range="--reduce-range" in sys.argv)
