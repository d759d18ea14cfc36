"""Frontends: turn whatever the user holds into an ONNX model the passes can rewrite.

`load_model` is the one entry point: `.onnx` files, TensorFlow SavedModel directories and
Keras `.keras` / `.h5` files all come out as an `ir.Model` at opset >= 13 (the lowest opset
with per-channel QuantizeLinear/DequantizeLinear): the IR every later step works on.
"""

from pathlib import Path

import onnx_ir as ir

from onnxio import InputError
from quantize.frontend.onnx_file import load_onnx, upgrade_opset

MIN_OPSET = 13


def load_model(path) -> ir.Model:
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_dir():
        if not (path / "saved_model.pb").exists():
            raise InputError(
                path, "a directory is read as a TensorFlow SavedModel, but it has no saved_model.pb"
            )
        from quantize.frontend.tensorflow import saved_model_to_onnx

        model = saved_model_to_onnx(path)
    elif path.suffix in (".keras", ".h5", ".hdf5"):
        from quantize.frontend.tensorflow import keras_file_to_onnx

        model = keras_file_to_onnx(path)
    else:
        model = load_onnx(path)
    return ir.serde.deserialize_model(upgrade_opset(model, MIN_OPSET, path))
