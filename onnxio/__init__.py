"""ONNX models in and out: the error type for bad input, atomic saving of models of any size,
and plain ONNX Runtime CPU sessions. A leaf: `calibration`, `quantize`, `models` and
`physics_metrics` import it; it imports none of them.
"""

from onnxio.errors import InputError
from onnxio.files import atomic_path, is_large, save_model, write_text
from onnxio.session import ObservingSession, computing_only, cpu_session

__all__ = [
    "InputError",
    "ObservingSession",
    "atomic_path",
    "computing_only",
    "cpu_session",
    "is_large",
    "save_model",
    "write_text",
]
