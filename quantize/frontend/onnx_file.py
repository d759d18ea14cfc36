"""Reading `.onnx` files with errors that say what is wrong, and raising old opsets."""

from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from onnxio import InputError


def load_onnx(path: Path) -> onnx.ModelProto:
    try:
        model = onnx.load(str(path))
    except PermissionError:
        raise InputError(path, "permission denied") from None
    except (DecodeError, RuntimeWarning, ValueError, UnicodeDecodeError) as exc:
        raise InputError(
            path,
            f"not a readable ONNX model ({type(exc).__name__}); is the file truncated or of another format?",
        ) from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not model.graph.node or not model.graph.input:
        raise InputError(
            path,
            "not a usable ONNX model: the graph has no nodes or no inputs (truncated or another format?)",
        )
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first_line = str(exc).strip().splitlines()[0]
        raise InputError(path, f"invalid ONNX model: {first_line}") from None
    return model


def default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def upgrade_opset(model: onnx.ModelProto, minimum: int, path: Path) -> onnx.ModelProto:
    """Per-channel Q/DQ needs opset 13; convert older models rather than emit invalid ones."""
    if default_opset(model) >= minimum:
        return model
    try:
        from onnx import version_converter

        upgraded = version_converter.convert_version(model, minimum)
        onnx.checker.check_model(upgraded)
    except Exception as exc:  # the converter raises bare RuntimeError/ValidationError by adapter
        raise InputError(
            path,
            f"cannot raise opset {default_opset(model)} to {minimum}: {str(exc).splitlines()[0]}",
        ) from None
    return upgraded
