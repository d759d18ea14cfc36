"""Running models: ONNX Runtime sessions on the CPU."""

import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from quantize.modelio import is_large, save_model
from quantize.target import EXACT_U8U8_OPTION, TARGET_KEY, host_target, saturates


class TargetMismatchWarning(UserWarning):
    """A model quantized for full-range int8 weights runs on a CPU whose kernels saturate."""


def session(model: onnx.ModelProto | Path, threads: int = 0, optimized_path: Path | None = None,
            exact_kernels: bool | None = None) -> ort.InferenceSession:
    """A CPU session with all graph optimisations, for a model in memory or on disk.

    By default (`exact_kernels=None`) a model quantize made for a VNNI or AMX CPU, run on one
    whose U8S8 kernels saturate, gets ORT's exact U8U8 kernels instead (slower), with a
    TargetMismatchWarning naming both; True asks for the U8U8 kernels, False for ORT's default.
    """
    if exact_kernels is not None:
        options = _options(threads, optimized_path)
        if exact_kernels:
            options.add_session_config_entry(EXACT_U8U8_OPTION, "1")
        return _session(model, options)
    sess = _session(model, _options(threads, optimized_path))
    made_for = sess.get_modelmeta().custom_metadata_map.get(TARGET_KEY)
    if made_for is None or not saturates(host_target()) or saturates(made_for):
        return sess
    warnings.warn(f"this model was quantized for {made_for} (full-range int8 weights), but this CPU's INT8 path is "
                  f"{host_target()}, whose kernels saturate: running ORT's exact U8U8 kernels, slower; "
                  f"re-quantize with --target {host_target()} for a model that is exact and fast here", TargetMismatchWarning, stacklevel=2)
    return session(model, threads, optimized_path, exact_kernels=True)


def _options(threads: int, optimized_path: Path | None) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{Path(optimized_path).name}.data")
    return options


def _session(model: onnx.ModelProto | Path, options: ort.SessionOptions) -> ort.InferenceSession:
    if isinstance(model, (str, Path)):
        return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    if not is_large(model):
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory() as tmp:  # ORT reads external data while it builds the session
        path = Path(tmp) / "model.onnx"
        save_model(model, path)
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_batches(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], batch: int) -> list[np.ndarray]:
    """Run all samples of `feeds` in batches; returns every output concatenated over samples."""
    n = len(next(iter(feeds.values())))
    parts = [sess.run(None, {k: v[i:i + batch] for k, v in feeds.items()}) for i in range(0, n, batch)]
    return [np.concatenate(outs) for outs in zip(*parts)]
