"""`python -m benchmarks.openvino_activations`: which activation form OpenVINO's INT8 kernels
favour, and what it costs in fidelity, on the zoo's YOLOv8n (the one model where ours made for
OpenVINO runs behind NNCF).

Five models in OpenVINO, compiled for one 320x320 image, 2 threads, timed in one run: our
cleaned FP32 graph; ours made for OpenVINO (`quantize --runtime openvino`: uint8 activations
with zero points, the form ONNX Runtime's kernels favour, each Conv's own moved into its bias and
padding, quantize/passes/zero_point_into_bias.py); the same with the zero points left in the
Convs' inputs (the form before that pass); that form with every activation rewritten to
symmetric int8 (zero point 0, the scale widened to the larger side of its range; nothing else
changes); and NNCF's (symmetric activations, its performance preset). Per model: throughput,
where OpenVINO spends a run by op type and its Convolutions by kernel, and the zoo's agreement
with FP32 (benchmarks/zoo/yolo.py).
"""

import json
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper
from onnx_ir.passes import common

from benchmarks.results import for_this_cpu, sized, write_results
from benchmarks.rivals import nncf_int8
from benchmarks.zoo import yolo
from benchmarks.zoo.run import made_for_openvino
from quantize.bench import compare
from quantize.passes.rewrite import raised_bias, set_bias
from quantize.pipeline import cleaned_fp32
from quantize.runtime import OpenVINOSession, served_sessions
from quantize.target import host_isa

THREADS = 2
WARM_UP_RUNS = 20
PROFILED_RUNS = 30
SHOWN_OPS = ("Convolution", "Subgraph", "Pad")
OP_NOTE = (
    f"Each kernel's time is its median over {PROFILED_RUNS} profiled runs. Op types as "
    "OpenVINO's CPU plugin names them: a Subgraph is a chain of elementwise ops it fuses and "
    "compiles as one kernel (here the SiLUs, the requantizations and the dequantizations that "
    "do not fold into a Convolution)."
)


def symmetric_activations(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each uint8 activation quantized around a zero point z != 0 at scale s made
    int8 with zero point 0 at scale s * max(z, 255 - z) / 127: the same range, or wider."""
    return _with_zero_points(
        model, lambda scale, zero: (scale * max(zero, 255 - zero) / 127, np.int8(0))
    )


def zero_points_in_convs(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Conv that reads its uint8 input from zero, padded with the zero point
    (`ZeroPointIntoBiasPass`), reading it at that zero point again: its padding back in the
    Conv, its bias lowered back. The same arithmetic."""
    graph = ir.serde.deserialize_model(model)
    for conv in [node for node in graph.graph if node.op_type == "Conv"]:
        dequantize = conv.inputs[0].producer()
        if dequantize is None or dequantize.op_type != "DequantizeLinear":
            continue
        quantized, scale, zero_point = dequantize.inputs
        pad = quantized.producer()
        quantize = pad.inputs[0].producer() if pad is not None and pad.op_type == "Pad" else pad
        if (
            quantize is None
            or quantize.op_type != "QuantizeLinear"
            or zero_point.const_value.numpy() != 0
        ):
            continue
        z = quantize.inputs[2]
        if int(z.const_value.numpy()) == 0:
            continue
        raised = raised_bias(conv, float(scale.const_value.numpy()) * int(z.const_value.numpy()))
        set_bias(graph.graph, conv, raised.astype(np.int32), f"{conv.name}_bias_at_zero_point")
        if pad.op_type == "Pad":
            widths = list(pad.inputs[1].const_value.numpy())
            half = len(widths) // 2
            conv.attributes["pads"] = ir.AttrInt64s("pads", widths[2:half] + widths[half + 2 :])
        dequantize.replace_input_with(0, quantize.outputs[0])
        dequantize.replace_input_with(2, z)
    common.RemoveUnusedNodesPass()(graph)
    return ir.serde.serialize_model(graph)


def _with_zero_points(model: onnx.ModelProto, rewrite) -> onnx.ModelProto:
    """A copy of `model` with `rewrite(scale, zero point) -> (scale, zero point)` applied to each
    scalar uint8 activation quantization whose zero point is not 0."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    constants = {c.name: c for c in model.graph.initializer}
    pairs = {
        (node.input[1], node.input[2])
        for node in model.graph.node
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) == 3
    }
    for scale_name, zero_name in pairs:
        zero = numpy_helper.to_array(constants[zero_name])
        if zero.dtype != np.uint8 or zero.ndim or zero == 0:
            continue
        scale = numpy_helper.to_array(constants[scale_name])
        new_scale, new_zero = rewrite(float(scale), int(zero))
        constants[scale_name].CopyFrom(numpy_helper.from_array(np.float32(new_scale), scale_name))
        constants[zero_name].CopyFrom(numpy_helper.from_array(new_zero, zero_name))
    return model


def kernel_times(model, feed: dict) -> dict[str, dict]:
    """OpenVINO's kernels on `feed`, by op type and kernel: how many ran and their median
    microseconds a run over PROFILED_RUNS runs (OpenVINO profiles one run at a time)."""
    compiled = OpenVINOSession(model, THREADS, {k: v.shape for k, v in feed.items()}, profile=True)
    for _ in range(WARM_UP_RUNS):
        compiled.run(None, feed)
    runs = []
    for _ in range(PROFILED_RUNS):
        compiled.run(None, feed)
        runs.append(compiled.kernel_times())
    return {
        f"{op} {kernel}": {
            "op": op,
            "kernel": kernel,
            "count": count,
            "us": float(np.median([run.get((op, kernel), (0, 0.0))[1] for run in runs])),
        }
        for (op, kernel), (count, _) in sorted(runs[-1].items())
    }


def op_times(kernels: dict[str, dict]) -> dict[str, dict]:
    """`kernels` summed by op type, slowest first."""
    ops: dict[str, dict] = {}
    for k in kernels.values():
        op = ops.setdefault(k["op"], {"count": 0, "us": 0.0})
        op["count"] += k["count"]
        op["us"] += k["us"]
    return dict(sorted(ops.items(), key=lambda item: -item[1]["us"]))


def main() -> None:
    zoo_model = yolo.models()[0]
    path = zoo_model.build()
    calibration = zoo_model.calibration(sized(256, 16))
    feeds = zoo_model.evaluation(sized(120, 8))
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(Path(tmp) / "calib.npz", **calibration)
        ours, _ = made_for_openvino(path, Path(tmp) / "calib.npz", ("--serve-batch", "1"))
    models = {
        "fp32_cleaned": cleaned_fp32(path),
        "ours": ours,
        "ours_zero_points_in_convs": zero_points_in_convs(ours),
        "ours_symmetric": symmetric_activations(zero_points_in_convs(ours)),
        "nncf": nncf_int8(path, calibration),
    }
    served = {name: served_sessions(m, feeds, THREADS, "openvino") for name, m in models.items()}
    timed = {name: partial(sessions[0].run, None, feeds[0]) for name, sessions in served.items()}
    speed = compare(timed, len(feeds[0]["images"]), sized(8.0, 0.5), rounds=16)
    reference = [s.run(None, f) for s, f in zip(served_sessions(onnx.load(path), feeds), feeds)]
    result = {"machine": host_isa(), "threads": THREADS, "model": zoo_model.name, "models": {}}
    for name, model in models.items():
        outputs = [s.run(None, f) for s, f in zip(served[name], feeds)]
        result["models"][name] = {
            "throughput": speed[name]["throughput"],
            "over_nncf": speed[name]["throughput"] / speed["nncf"]["throughput"],
            "agreement": zoo_model.fidelity(feeds, reference, outputs)["value"],
            "kernels": kernel_times(model, feeds[0]),
        }
        result["models"][name]["ops"] = op_times(result["models"][name]["kernels"])
    markdown = table(result)
    write_results(for_this_cpu("openvino_activations"), result, markdown)
    print(markdown)
    print(json.dumps(result["models"], indent=1, default=float))


def table(result: dict) -> str:
    rows = [
        f"# Activation form in OpenVINO: {result['model']}, 320x320, batch 1, "
        f"{result['threads']} threads ({result['machine']['int8_gemm_path']})",
        "",
        "| model | images/s | x NNCF | agreement with FP32 (target 0.95) | ms a run by op: "
        + ", ".join(SHOWN_OPS)
        + ", the rest | Convolution kernels: count, ms a run |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in result["models"].items():
        shown = [m["ops"].get(op, {"us": 0.0})["us"] for op in SHOWN_OPS]
        rest = sum(op["us"] for op in m["ops"].values()) - sum(shown)
        by_op = " / ".join(f"{us / 1000:.2f}" for us in [*shown, rest])
        convs = "; ".join(
            f"{k['kernel']} {k['count']}, {k['us'] / 1000:.2f}"
            for k in m["kernels"].values()
            if k["op"] == "Convolution"
        )
        rows.append(
            f"| {name} | {m['throughput']:.1f} | {m['over_nncf']:.2f}x | {m['agreement']:.4f} "
            f"| {by_op} | {convs} |"
        )
    return "\n".join(rows) + "\n\n" + OP_NOTE


if __name__ == "__main__":
    main()
