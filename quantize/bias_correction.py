"""Bias correction: each INT8 Conv's bias shifted by the mean error of its output per channel.

Rounding in a deep stack of depthwise convolutions does not average out: it moves the mean of
each channel, and the next layer reads the moved mean (the PP-OCRv4 recogniser's layer SQNR falls
from 30 dB to 0 over its backbone). The shift of a Conv is measured on calibration samples with
the shifts of the Convs before it already applied, in graph order, as the error it still sees.
"""

from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir

from quantize.passes.rewrite import add_initializer
from quantize.validate import run_with_outputs

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
    batch: dict[str, np.ndarray],
    threads: int,
) -> dict[str, np.ndarray]:
    """Conv name -> the amount its bias must drop: the mean per channel of its INT8 output
    minus its FP32 output on `batch`, with the model `lowered(shifts so far)`."""
    outputs = [conv.outputs[0].name for conv in convs]
    reference = {}
    for start in range(0, len(outputs), GROUP):
        group = outputs[start : start + GROUP]
        reference.update(
            zip(group, map(_channel_means, run_with_outputs(fp32, group, batch, threads)))
        )
    shifts: dict[str, np.ndarray] = {}
    for conv, output in zip(convs, outputs):
        (got,) = run_with_outputs(lowered(shifts), [output], batch, threads)
        shifts[conv.name] = (_channel_means(got) - reference[output]).astype(np.float32)
    return shifts


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


def _channel_means(activation: np.ndarray) -> np.ndarray:
    return activation.mean(axis=(0, *range(2, activation.ndim)), dtype=np.float64)
