"""Running models: ONNX Runtime sessions on the CPU, and which integer ISA paths exist here."""

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from quantize.modelio import is_large, save_model

# The x86 features that decide which MLAS INT8 kernels ONNX Runtime picks.
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx_vnni_int8", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")


def session(model: onnx.ModelProto | Path, threads: int = 0, optimized_path: Path | None = None) -> ort.InferenceSession:
    """A CPU session with all graph optimisations, for a model in memory or on disk."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{Path(optimized_path).name}.data")
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


def cpu_isa() -> dict:
    """CPU model, the integer-relevant ISA flags present, and the ORT version."""
    flags, model_name = set(), "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name") and model_name == "unknown":
                model_name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    present = [f for f in ISA_FLAGS if f in flags]
    return {
        "cpu": model_name,
        "isa_flags": present,
        "int8_gemm_path": _int8_path(set(present)),
        "onnxruntime": ort.__version__,
    }


def _int8_path(flags: set[str]) -> str:
    """The best MLAS U8S8 path these flags allow (MLAS dispatches on the same CPUID bits)."""
    if {"amx_tile", "amx_int8"} <= flags:
        return "AMX-INT8 (GEMM), AVX512-VNNI (conv)"
    if "avx512_vnni" in flags:
        return "AVX512-VNNI"
    if "avx_vnni" in flags:
        return "AVX-VNNI"
    if "avx512f" in flags:
        return "AVX512 (no VNNI)"
    return "AVX2" if "avx2" in flags else "SSE"
