"""TensorFlow/Keras frontend: export through tf2onnx with an explicit input signature.

Keras 3 and TF >= 2.16 broke tf2onnx's own Keras path; tracing a `tf.function` with a named
`TensorSpec` per input works for every model with known input ranks. Keras files load with
`safe_mode=True`, so nothing stored in the model file (lambdas, pickled code) is executed.
"""

from pathlib import Path

import onnx

from onnxio import InputError

EXPORT_OPSET = 17


def keras_to_onnx(model, opset: int = EXPORT_OPSET) -> onnx.ModelProto:
    """Export an in-memory Keras model; input names are the Keras input names."""
    import tensorflow as tf
    import tf2onnx

    specs = [
        tf.TensorSpec([None, *t.shape[1:]], t.dtype, name=_input_name(t, i))
        for i, t in enumerate(model.inputs)
    ]

    @tf.function(input_signature=specs)
    def serve(*xs):
        return model(xs[0] if len(xs) == 1 else list(xs), training=False)

    proto, _ = tf2onnx.convert.from_function(serve, input_signature=specs, opset=opset)
    return proto


def keras_file_to_onnx(path: Path) -> onnx.ModelProto:
    import keras

    try:
        model = keras.saving.load_model(path, compile=False, safe_mode=True)
    except Exception as exc:  # Keras raises ValueError, OSError, TypeError... by format
        raise InputError(path, f"not a loadable Keras model: {_first_line(exc)}") from None
    return keras_to_onnx(model)


def saved_model_to_onnx(path: Path) -> onnx.ModelProto:
    import tensorflow as tf
    import tf2onnx

    try:
        loaded = tf.saved_model.load(str(path))
        signature = loaded.signatures["serving_default"]
    except KeyError:
        raise InputError(path, "the SavedModel has no 'serving_default' signature") from None
    except Exception as exc:
        raise InputError(path, f"not a loadable SavedModel: {_first_line(exc)}") from None
    kwargs_spec = signature.structured_input_signature[1]
    names = sorted(kwargs_spec)
    specs = [tf.TensorSpec(kwargs_spec[n].shape, kwargs_spec[n].dtype, name=n) for n in names]

    @tf.function(input_signature=specs)
    def serve(*xs):
        return signature(**dict(zip(names, xs)))

    proto, _ = tf2onnx.convert.from_function(serve, input_signature=specs, opset=EXPORT_OPSET)
    return proto


def _input_name(tensor, index: int) -> str:
    name = getattr(tensor, "name", "") or f"input_{index}"
    return name.split(":")[0]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
