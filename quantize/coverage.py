"""What ONNX Runtime really runs in INT8: read its optimized graph, not our intentions.

After the Q/DQ passes, ORT's graph optimiser fuses DequantizeLinear -> op -> QuantizeLinear
into integer kernels where it has one. A planned node that survives in ORT's optimized graph
as its float op with a dequantized input is an island: it runs in FP32 between a
DequantizeLinear and a QuantizeLinear, which is slower than no quantization at all.

Some uint8 kernels are slower than float ones: ORT drops the Q/DQ pair around a MaxPool and runs
it on uint8, in NHWC (NhwcMaxPool) next to its NHWC integer convolutions, but elsewhere in a
generic NCHW kernel several times slower than its float MaxPool with the DequantizeLinear and
QuantizeLinear around it (`python -m benchmarks.ort_fusions`, `ort_fusions_vnni.md`).
"""

import tempfile
from collections import Counter
from pathlib import Path

import onnx

from quantize.runtime import session

# Kernels that compute on integers (ORT names, any domain).
INTEGER_OPS = {
    "QLinearConv",
    "NhwcQLinearConv",
    "QLinearMatMul",
    "QGemm",
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "ConvInteger",
    "QLinearAdd",
    "QLinearMul",
    "QLinearConcat",
    "QLinearGlobalAveragePool",
    "QLinearAveragePool",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearSoftmax",
    "QAttention",
    "DynamicQuantizeMatMul",
    "DynamicQuantizeLSTM",
    "QLinearReduceMean",
    "QLinearWhere",
}
BOUNDARY_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
# Ops that move data without arithmetic: they run on whatever type flows in (uint8 too).
MOVEMENT_OPS = {
    "MaxPool",
    "NhwcMaxPool",
    "Transpose",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Concat",
    "Slice",
    "Split",
    "Gather",
    "Resize",
    "Shape",
}


def optimized_graph(model: onnx.ModelProto, threads: int = 1) -> onnx.GraphProto:
    """The graph ORT will execute, after its fusions."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "optimized.onnx"
        session(model, threads, optimized_path=path)
        return onnx.load(str(path), load_external_data=False).graph


def float_islands(graph: onnx.GraphProto, planned: set[str]) -> set[str]:
    """Planned nodes ORT still runs as float ops fed by a DequantizeLinear."""
    dequantized = _dequantized(graph)
    islands = set()
    for node in graph.node:
        origin = next(
            (n for n in (node.name, node.name.rsplit("/", 1)[0]) if n in planned), None
        )  # ORT renames what it fuses: "<name>/MatMulAddFusion"
        if origin is None or node.op_type in INTEGER_OPS | BOUNDARY_OPS:
            continue
        if any(i in dequantized for i in node.input):
            islands.add(origin)
    return islands


def nchw_uint8_maxpools(graph: onnx.GraphProto, planned: set[str]) -> set[str]:
    """Planned MaxPools ORT runs on uint8 in its NCHW kernel (no DequantizeLinear feeds them)."""
    dequantized = _dequantized(graph)
    return {
        node.name
        for node in graph.node
        if node.op_type == "MaxPool"
        and node.domain in ("", "ai.onnx")
        and node.name in planned
        and node.input[0] not in dequantized
    }


def _dequantized(graph: onnx.GraphProto) -> set[str]:
    """The tensors a DequantizeLinear writes (float, read from uint8), also after the
    ReorderInput by which ORT's NCHWc layout (AVX2: 8-channel blocks) hands them to float ops."""
    dequantized = {
        out for node in graph.node if node.op_type == "DequantizeLinear" for out in node.output
    }
    for node in graph.node:  # in topological order
        if node.op_type == "ReorderInput" and node.input[0] in dequantized:
            dequantized.update(node.output)
    return dequantized


def kernel_counts(graph: onnx.GraphProto) -> dict[str, dict[str, int]]:
    """Op counts of the executed graph: integer kernels, Q/DQ boundaries, data movement, float."""
    counts: dict[str, Counter] = {
        kind: Counter() for kind in ("int8", "boundary", "movement", "float")
    }
    for node in graph.node:
        counts[_kind(node.op_type)][node.op_type] += 1
    return {kind: dict(sorted(c.items())) for kind, c in counts.items()}


def _kind(op_type: str) -> str:
    if op_type in INTEGER_OPS:
        return "int8"
    if op_type in BOUNDARY_OPS:
        return "boundary"
    return "movement" if op_type in MOVEMENT_OPS else "float"
