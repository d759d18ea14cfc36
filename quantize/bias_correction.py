"""Bias correction: each INT8 Conv's bias shifted by the mean error of its output per channel.

Rounding in a deep stack of depthwise convolutions does not average out: it moves the mean of
each channel, and the next layer reads the moved mean (the PP-OCRv4 recogniser's layer SQNR falls
from 30 dB to 0 over its backbone). The shift of a Conv is measured on calibration samples with
the shifts of the Convs above it already applied, as the error it still sees; Convs on parallel
branches are measured together.
"""

from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir

from quantize.passes.rewrite import add_initializer
from quantize.validate import computing_session

GROUP = 8  # FP32 outputs fetched per run: the detector's full-page activations are large


def correctable(graph: ir.Model, int8: set[str]) -> list[ir.Node]:
    """The INT8 Convs with a constant bias, one value per output channel, in graph order."""
    return [
        n
        for n in graph.graph
        if n.op_type == "Conv"
        and n.name in int8
        and len(n.inputs) > 2
        and n.inputs[2] is not None
        and n.inputs[2].const_value is not None
        and len(n.inputs[2].const_value.shape) == 1
    ]


def bias_shifts(
    convs: list[ir.Node],
    fp32: onnx.ModelProto,
    lowered: Callable[[dict[str, np.ndarray]], onnx.ModelProto],
    batches: list[dict[str, np.ndarray]],
    threads: int,
) -> dict[str, np.ndarray]:
    """Conv name -> the amount its bias must drop: the mean per channel of its INT8 output
    minus its FP32 output over `batches`, with the model `lowered(shifts so far)`. The Convs are
    measured wave by wave (`waves`): one lowering per wave, not per Conv."""
    output = {conv.name: conv.outputs[0].name for conv in convs}
    reference = _channel_means(fp32, list(output.values()), batches, threads)
    shifts: dict[str, np.ndarray] = {}
    for wave in waves(convs):
        got = _channel_means(lowered(shifts), [output[c.name] for c in wave], batches, threads)
        for conv in wave:
            name = output[conv.name]
            shifts[conv.name] = (got[name] - reference[name]).astype(np.float32)
    return shifts


def waves(convs: list[ir.Node]) -> list[list[ir.Node]]:
    """`convs` (nodes of one graph) in waves: each Conv after every wave that holds one of its
    ancestors, as early as that allows. A Conv's output depends on no other Conv's shift than
    its ancestors', so a wave's shifts are what measuring one Conv at a time in graph order
    would find."""
    if not convs:
        return []
    chosen = {conv.name for conv in convs}
    waves_before: dict[ir.Value, int] = {}  # a value -> how many waves its ancestors fill
    found: list[list[ir.Node]] = []
    for node in convs[0].graph:
        depth = max((waves_before.get(v, 0) for v in node.inputs if v is not None), default=0)
        if node.name in chosen:
            if depth == len(found):
                found.append([])
            found[depth].append(node)
            depth += 1
        for value in node.outputs:
            waves_before[value] = depth
    return found


def shifted(graph: ir.Model, shifts: dict[str, np.ndarray], int8: set[str]) -> ir.Model:
    """A copy of `graph` whose named Convs that are in `int8` have their biases lowered by their
    shifts. A Conv sent back to FP32 after the shifts were measured keeps its bias: its shift
    was mostly its own rounding error, which it no longer makes."""
    copy = graph.clone()
    for conv in copy.graph:
        if conv.name in shifts and conv.name in int8:
            bias = conv.inputs[2]
            corrected = bias.const_value.numpy() - shifts[conv.name].astype(bias.dtype.numpy())
            conv.replace_input_with(
                2, add_initializer(copy.graph, f"{conv.name}_corrected_bias", corrected)
            )
    return copy


def _channel_means(
    model: onnx.ModelProto, names: list[str], batches: list[dict], threads: int
) -> dict[str, np.ndarray]:
    """Each named tensor's mean per channel (axis 1) over all of `batches`, fetched GROUP at a
    time: a model whose batch is fixed at one sample is measured on as many as any other."""
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for start in range(0, len(names), GROUP):
        group = names[start : start + GROUP]
        computing = computing_session(model, group, threads)
        for batch in batches:
            for name, got in zip(group, computing.run(group, batch)):
                sums[name] = sums.get(name, 0.0) + got.sum(
                    axis=(0, *range(2, got.ndim)), dtype=np.float64
                )
                counts[name] = counts.get(name, 0) + got.size // got.shape[1]
    return {name: sums[name] / counts[name] for name in names}
