"""quantize: post-training INT8 quantization for CPU inference with ONNX Runtime.

    from quantize import QuantConfig, quantize_
    result = quantize_("model.onnx", "calib.npz", QuantConfig(method="entropy"))
    onnx.save(result.model, "model.int8.onnx")
"""

_PUBLIC = {
    "QuantConfig": "quantize.config",
    "QuantizeError": "quantize.errors",
    "QuantizeResult": "quantize.pipeline",
    "fall_back": "quantize.fallback",
    "quantize_": "quantize.pipeline",
}
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    # Lazy, so that `calibration` can use `quantize.errors` without an import cycle.
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'quantize' has no attribute {name!r}")
