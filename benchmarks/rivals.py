"""The rival quantizers, each configured as its own documentation recommends for x86 CPUs."""

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx

from onnxio import InputError
from quantize.frontend import MIN_OPSET
from quantize.frontend.onnx_file import upgrade_opset
from quantize.runtime import openvino_model
from quantize.target import host_target, saturates


def ort_quantize_static(
    fp32: onnx.ModelProto,
    calib: dict[str, np.ndarray] | list[dict],
    batch: int = 32,
    activations: str = "uint8",
    transformer: bool = False,
) -> onnx.ModelProto:
    """ONNX Runtime's quantize_static: QDQ, uint8 activations, per-channel int8 weights (per tensor
    where the model cannot be raised to opset 13: `_for_per_channel`), MinMax
    calibration, after its own quant_pre_process (the settings its docstring gives for VNNI CPUs),
    with `reduce_range` (7-bit weights) where this CPU's kernels saturate, as its docs advise for
    non-VNNI machines. `calib` is arrays cut into `batch`-sized feeds, or a list of ready feeds.

    `transformer`: as ORT's transformer examples do, only MatMul and Gemm are quantized
    (LayerNorm, Softmax, the mask Add stay float) and ranges are the 99.999th percentile,
    not MinMax (one outlier channel would set them). ORT's percentile calibrator cannot take
    feeds whose shapes differ (it stacks every batch's values: "inhomogeneous shape"), so for
    those (a translator's sentences and decoder steps) the ranges are MinMax."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            if isinstance(calib, list):
                self.batches = iter(calib)
                return
            n = len(next(iter(calib.values())))
            self.batches = iter(
                [{k: v[i : i + batch] for k, v in calib.items()} for i in range(0, n, batch)]
            )

        def get_next(self):
            return next(self.batches, None)

    ranges = (
        {
            "calibrate_method": CalibrationMethod.Percentile,
            "extra_options": {"CalibPercentile": 99.999},
        }
        if not isinstance(calib, list) or len({_shapes(f) for f in calib}) == 1
        else {}
    )
    transformer_options = (
        {"op_types_to_quantize": ["MatMul", "Gemm"], **ranges} if transformer else {}
    )
    fp32, per_channel = _for_per_channel(fp32)
    return _run_ort_quantizer(
        fp32,
        lambda prepared, output: quantize_static(
            prepared,
            output,
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
            weight_type=QuantType.QInt8,
            reduce_range=saturates(host_target()),
            **transformer_options,
        ),
    )


def _shapes(feed: dict) -> tuple:
    return tuple(v.shape for v in feed.values())


def ort_quantize_dynamic(fp32: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX Runtime's quantize_dynamic: per-channel int8 weights (7-bit where this CPU's kernels
    saturate), activations quantized at run time (MatMulInteger / DynamicQuantizeMatMul), after
    its own quant_pre_process."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    return _run_ort_quantizer(
        fp32,
        lambda prepared, output: quantize_dynamic(
            prepared,
            output,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=saturates(host_target()),
        ),
    )


def _for_per_channel(fp32: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    """`fp32` raised to opset 13, where DequantizeLinear takes a channel axis, as an expert
    raises a model before quantize_static per channel (below 13 it writes an invalid graph:
    "Unrecognized attribute: axis"), and whether its weights can be per channel: where ONNX's
    version converter cannot raise it (some Paddle2ONNX exports), the model as it is with
    per-tensor weights."""
    try:
        return upgrade_opset(fp32, MIN_OPSET, Path("the rival's model")), True
    except InputError:
        return fp32, False


def _run_ort_quantizer(fp32: onnx.ModelProto, quantize) -> onnx.ModelProto:
    """quant_pre_process, then `quantize(prepared_path, output_path)`, in a temporary directory:
    its pre-processing leaves sym_shape_infer_temp.onnx and a weights file in the current
    directory when symbolic shape inference fails."""
    from onnxruntime.quantization import quant_pre_process

    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        source, prepared, output = (
            str(Path(tmp) / name) for name in ("fp32.onnx", "prep.onnx", "int8.onnx")
        )
        onnx.save(fp32, source)
        try:
            quant_pre_process(source, prepared)
        except Exception:  # its symbolic shape inference gives up on dynamic shapes
            quant_pre_process(source, prepared, skip_symbolic_shape=True)
        quantize(prepared, output)
        return onnx.load(output)


def tflite_full_int8(keras_model, calib: np.ndarray, batch: int = 32) -> bytes:
    """TensorFlow Lite's full-integer converter (int8 kernels only, float I/O at the edges)."""
    import tensorflow as tf

    def representative():
        for i in range(0, len(calib), batch):
            yield [calib[i : i + batch]]

    with tempfile.TemporaryDirectory() as tmp:
        keras_model.export(tmp, verbose=False)  # Keras 3: the converter reads a SavedModel
        converter = tf.lite.TFLiteConverter.from_saved_model(tmp)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        return converter.convert()


class TFLiteRunner:
    """A TFLite interpreter resized to one input shape, with the session-like `run` of ORT."""

    def __init__(self, flatbuffer: bytes, shape: tuple, threads: int):
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_content=flatbuffer, num_threads=threads)
        self.input = self.interpreter.get_input_details()[0]["index"]
        self.output = self.interpreter.get_output_details()[0]["index"]
        self.interpreter.resize_tensor_input(self.input, list(shape))
        self.interpreter.allocate_tensors()

    def run(self, x: np.ndarray) -> np.ndarray:
        self.interpreter.set_tensor(self.input, x)
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self.output)


def nncf_int8(
    fp32_path: Path,
    calib: np.ndarray | dict[str, np.ndarray] | list[dict],
    transformer: bool = False,
):
    """NNCF's post-training quantization with its defaults (performance preset: symmetric
    activations; fast bias correction; for transformers its TRANSFORMER model type) of the FP32
    model as OpenVINO reads it, calibrated on every sample of `calib` (an array for a one-input
    model, or arrays per input name), one per item, or on every feed of a list of ready feeds.
    An OpenVINO model, for OpenVINOSession."""
    os.environ.setdefault("NNCF_CI", "1")  # NNCF reports usage to Intel unless told it runs in CI
    import nncf

    model = openvino_model(fp32_path)
    options = {"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}
    items = calib if isinstance(calib, list) else _samples(calib)
    return nncf.quantize(model, nncf.Dataset(items), subset_size=len(items), **options)


def _samples(calib: np.ndarray | dict[str, np.ndarray]) -> list:
    """One feed per sample: arrays of one row (per input name for a dict)."""
    if isinstance(calib, dict):
        n = len(next(iter(calib.values())))
        return [{k: v[i : i + 1] for k, v in calib.items()} for i in range(n)]
    return [calib[i : i + 1] for i in range(len(calib))]


QUARK_PYTHON = Path(os.environ.get("QUARK_PYTHON", ".venv-quark/bin/python"))


def require_quark() -> None:
    """Exit with a one-line error unless AMD Quark's virtualenv is there: a benchmark calls it
    as it starts, not after the hour of work that comes before its Quark rows."""
    if not QUARK_PYTHON.exists():
        raise SystemExit(
            f"AMD Quark is not installed: no {QUARK_PYTHON} (run: make .venv-quark/.installed)"
        )


def quark_int8(fp32_path: Path, calib: np.ndarray, input_name: str) -> onnx.ModelProto:
    """AMD Quark's ONNX PTQ (benchmarks/quark_child.py: U8S8_AAWS, per-channel, cross-layer
    equalization; 7-bit weights where this CPU saturates), in Quark's own virtualenv."""
    require_quark()
    with tempfile.TemporaryDirectory() as tmp:
        calib_path, out = Path(tmp) / "calib.npz", Path(tmp) / "quark.onnx"
        np.savez(calib_path, calib)
        run = subprocess.run(
            [str(QUARK_PYTHON), str(Path(__file__).with_name("quark_child.py"))]
            + [str(fp32_path), str(calib_path), input_name, str(out)]
            + (["--reduce-range"] if saturates(host_target()) else []),
            capture_output=True,
            text=True,
        )
        if run.returncode:
            raise RuntimeError(f"AMD Quark failed: {run.stderr.strip().splitlines()[-1]}")
        return onnx.load(out)
