"""Running models quantize made: ONNX Runtime CPU sessions that respect the model's CPU target,
and OpenVINO, whose CPU plugin runs the same Q/DQ models in INT8 (an optional dependency)."""

import tempfile
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
import onnxruntime as ort

from onnxio import cpu_session, save_model
from quantize.target import (
    EXACT_U8U8_OPTION,
    TARGET_KEY,
    WEIGHTS_KEY,
    default_weights,
    host_target,
    saturated_by,
)


class CompileError(RuntimeError):
    """OpenVINO could not compile a model: its CPU plugin's transformations reject some Q/DQ
    patterns (MoveFakeQuantize on a Concat of a one-node fallback trial of the PP-OCRv4
    recogniser, OpenVINO 2026.4)."""


class TargetMismatchWarning(UserWarning):
    """A model quantized for full-range int8 weights runs on a CPU whose kernels saturate."""


def session(
    model: onnx.ModelProto | Path,
    threads: int = 0,
    optimized_path: Path | None = None,
    exact_kernels: bool | None = None,
) -> ort.InferenceSession:
    """A CPU session with all graph optimisations, for a model in memory or on disk.

    By default (`exact_kernels=None`) a model quantize made with full-range int8 weights (for a
    VNNI or AMX CPU), run on one whose U8S8 kernels saturate, gets ORT's exact U8U8 kernels
    instead (slower), with a TargetMismatchWarning naming both; True asks for the U8U8 kernels,
    False for ORT's default.
    """
    if exact_kernels is not None:
        return cpu_session(
            model, threads, optimized_path, {EXACT_U8U8_OPTION: "1"} if exact_kernels else None
        )
    sess = cpu_session(model, threads, optimized_path)
    stamped = sess.get_modelmeta().custom_metadata_map
    made_for = stamped.get(TARGET_KEY)
    if made_for is None or not saturated_by(
        stamped.get(WEIGHTS_KEY, default_weights(made_for)), host_target()
    ):
        return sess
    warnings.warn(
        f"this model was quantized for {made_for} (full-range int8 weights), but this CPU's INT8 path is "
        f"{host_target()}, whose kernels saturate: running ORT's exact U8U8 kernels, slower; "
        f"re-quantize with --target {host_target()} for a model that is exact and fast here",
        TargetMismatchWarning,
        stacklevel=2,
    )
    return session(model, threads, optimized_path, exact_kernels=True)


RUNTIMES = ("onnxruntime", "openvino")


def openvino():
    """The openvino module; ValueError saying how to install it if it is missing."""
    try:
        import openvino
    except ImportError:
        raise ValueError("the OpenVINO runtime needs OpenVINO: pip install openvino") from None
    return openvino


METADATA = "metadata"


class Port(NamedTuple):
    """An input or output as ONNX Runtime's NodeArg names it: its name and shape (None where
    dynamic)."""

    name: str
    shape: list[int | None]


class ModelMeta(NamedTuple):
    custom_metadata_map: dict[str, str]


def openvino_model(model: onnx.ModelProto | Path):
    """An ONNX model (in memory or a path) as OpenVINO reads it: quantize's Q/DQ models run in
    INT8 there. The ONNX metadata, which OpenVINO's reader drops, goes into its "metadata"
    runtime info (OpenVINOSession.get_modelmeta reads it)."""
    core = openvino().Core()
    if isinstance(model, onnx.ModelProto):
        with tempfile.TemporaryDirectory() as tmp:
            save_model(model, Path(tmp) / "model.onnx")
            read = core.read_model(str(Path(tmp) / "model.onnx"))
    else:
        read = core.read_model(str(model))
        model = onnx.load(str(model), load_external_data=False)
    for entry in model.metadata_props:
        read.set_rt_info(entry.value, [METADATA, entry.key])
    return read


class OpenVINOSession:
    """A model compiled by OpenVINO for this CPU, with ONNX Runtime's `run(None, feeds)` (the
    outputs in the graph's order), `get_inputs`, `get_outputs` and `get_modelmeta`. One request on `threads` threads (0: OpenVINO's choice), and
    FP32 for whatever is not INT8: on AMX CPUs OpenVINO would otherwise run it in bf16.

    `model` is ONNX (in memory or a path) or an OpenVINO model (NNCF's output); `shapes`, if
    given (input name -> shape), compiles it for those input shapes, as OpenVINO's benchmark_app
    does. Time a model so: compiled for any shape, OpenVINO ran the 3DGAN generator's INT8 model
    slower than its FP32 graph on an AMX Xeon, and compiled for the batch faster. With
    `profile`, `kernel_times` reads where the last run spent its time."""

    def __init__(
        self,
        model,
        threads: int = 0,
        shapes: dict[str, tuple[int, ...]] | None = None,
        profile: bool = False,
    ):
        ov = openvino()
        try:
            read = model if isinstance(model, ov.Model) else openvino_model(model)
        except RuntimeError as error:  # an op its ONNX reader has no conversion for
            raise CompileError(f"OpenVINO cannot read the model: {error_line(error)}") from error
        if shapes is not None:
            read = read.clone()
            read.reshape({name: list(shape) for name, shape in shapes.items()})
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
        if shapes is None:  # its cache of kernels by shape computed a decoder step wrongly (2026.4)
            config["CPU_RUNTIME_CACHE_CAPACITY"] = 0
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        if profile:
            config["PERF_COUNT"] = True
        metadata = read.get_rt_info()[METADATA] if read.has_rt_info([METADATA]) else {}
        self._metadata = {key: value.astype(str) for key, value in metadata.items()}
        try:
            self._compiled = ov.Core().compile_model(read, "CPU", config)
        except RuntimeError as error:
            raise CompileError(f"OpenVINO cannot compile the model: {error_line(error)}") from error
        self._request = self._compiled.create_infer_request()

    def run(self, output_names: None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        results = self._request.infer(feeds)
        return [results[output] for output in self._compiled.outputs]

    def kernel_times(self) -> dict[tuple[str, str], tuple[int, float]]:
        """(op, kernel) -> (how many ran, microseconds) in the last run, as OpenVINO names them
        (its INT8 kernels end I8 for a uint8 input, i8 for int8); only with `profile`."""
        times: dict[tuple[str, str], tuple[int, float]] = {}
        for counter in self._request.get_profiling_info():
            if counter.status.name == "EXECUTED":
                key = (counter.node_type, counter.exec_type)
                count, us = times.get(key, (0, 0.0))
                times[key] = (count + 1, us + counter.real_time.total_seconds() * 1e6)
        return times

    def get_inputs(self) -> list[Port]:
        return [_port(p) for p in self._compiled.inputs]

    def get_outputs(self) -> list[Port]:
        return [_port(p) for p in self._compiled.outputs]

    def get_modelmeta(self) -> ModelMeta:
        return ModelMeta(self._metadata)


def error_line(error: Exception) -> str:
    """The last non-blank line of `error`'s message (OpenVINO's end with the cause), else its
    type's name."""
    return ([line for line in str(error).splitlines() if line.strip()] or [type(error).__name__])[
        -1
    ]


def _port(port) -> Port:
    shape = port.get_partial_shape()
    return Port(port.get_any_name(), [d.get_length() if d.is_static else None for d in shape])


def runtime_session(
    model,
    threads: int = 0,
    runtime: str = "onnxruntime",
    exact_kernels: bool | None = None,
    shapes: dict[str, tuple[int, ...]] | None = None,
):
    """A session of `runtime` (one of RUNTIMES) with ONNX Runtime's interface; `exact_kernels`
    as `session` takes it (ONNX Runtime only), `shapes` as OpenVINOSession does (OpenVINO only)."""
    if runtime == "openvino":
        return OpenVINOSession(model, threads, shapes)
    return session(model, threads, exact_kernels=exact_kernels)


def served_sessions(model, feeds: list[dict], threads: int = 0, runtime: str = "onnxruntime"):
    """A session of `runtime` for each of `feeds`, as it would serve them: ONNX Runtime's one for
    all, OpenVINO's compiled for each feed's input shapes. Compiled for any shape, OpenVINO
    computed YOLOv8n's INT8 boxes far from FP32's, and compiled for the image's shape close."""
    if runtime != "openvino":
        return [runtime_session(model, threads, runtime)] * len(feeds)
    keys = [tuple(sorted((name, array.shape) for name, array in feed.items())) for feed in feeds]
    compiled = {
        key: runtime_session(model, threads, runtime, shapes=dict(key))
        for key in dict.fromkeys(keys)
    }
    return [compiled[key] for key in keys]


def run_batches(
    sess: ort.InferenceSession, feeds: dict[str, np.ndarray], batch: int
) -> list[np.ndarray]:
    """Run all samples of `feeds` in batches; returns every output concatenated over samples."""
    n = len(next(iter(feeds.values())))
    parts = [
        sess.run(None, {k: v[i : i + batch] for k, v in feeds.items()}) for i in range(0, n, batch)
    ]
    return [np.concatenate(outs) for outs in zip(*parts)]
