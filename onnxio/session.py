"""Plain ONNX Runtime CPU sessions, for a model in memory (of any size) or on disk.

Models quantize wrote for a CPU target are run through `quantize.runtime.session`, which adds
the target check on top of this.
"""

import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort

from onnxio.files import is_large, save_model


def cpu_session(
    model: onnx.ModelProto | Path,
    threads: int = 0,
    optimized_path: Path | None = None,
    config: dict[str, str] | None = None,
) -> ort.InferenceSession:
    """A CPU session with all graph optimisations; `config` holds extra session config entries,
    `optimized_path` where ORT writes the graph it optimised."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name",
            f"{Path(optimized_path).name}.data",
        )
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    if isinstance(model, (str, Path)):
        return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    if not is_large(model):
        return ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    with (
        tempfile.TemporaryDirectory() as tmp
    ):  # ORT reads external data while it builds the session
        path = Path(tmp) / "model.onnx"
        save_model(model, path)
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
