"""Narrow a tensor's range to where its readers can tell values apart.

A SiLU, x * sigmoid(x), is flat below about -5: every x there gives an output within a fraction
of one step of the SiLU output's own grid. Spending the input's 256 levels on a tail its reader
cannot show coarsens the part it does show (YOLOv8n's calibrated Conv outputs reach tens of
units below zero). So a Conv output read only by SiLUs is clipped at the x
where the SiLU is within a quarter of an output step of 0: every clipped value errs with one
sign, so it is held to half the rounding bound. A hard-swish, x * clip(x + 3, 0, 6) / 6, is 0
for every x <= -3, so a Conv output read only by hard-swishes is clipped at -3, exactly.
"""

import math

import onnx_ir as ir
from scipy.optimize import brentq

from quantize.passes.rewrite import read_once

SILU_ARGMIN = -1.2784645  # silu'(x) = 0: below it SiLU rises back towards 0
HARD_SWISH_ZERO = -3.0  # hard-swish(x) = 0 for every x at or below it
CLIPPED_ERROR = 0.25  # in output steps


def narrowed_to_readers(
    model: ir.Model, nodes: set[str], ranges: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float]]:
    """`ranges` with every tensor read only by quantized SiLUs and hard-swishes clipped below
    where they are flat."""
    narrowed = dict(ranges)
    for value in _graph_values(model):
        if value.name not in ranges or value.is_graph_output() or not value.uses():
            continue
        floors = [_flat_below(value, user, nodes, ranges) for user, _ in value.uses()]
        if None in floors:
            continue
        lo, hi = ranges[value.name]
        if min(floors) < hi:
            narrowed[value.name] = (max(lo, min(floors)), hi)
    return narrowed


def _flat_below(
    value: ir.Value, user: ir.Node, nodes: set[str], ranges: dict[str, tuple[float, float]]
) -> float | None:
    """Where `user`, reading `value`, stops telling values apart below; None if it is not a
    quantized SiLU or hard-swish."""
    if user.op_type == "HardSwish":
        return HARD_SWISH_ZERO if user.name in nodes else None
    output = _silu_output(value, user, nodes)
    if output not in ranges:
        return None
    step = (ranges[output][1] - ranges[output][0]) / 255
    return _silu_flat_below(CLIPPED_ERROR * step, ranges[value.name][0])


def _graph_values(model: ir.Model):
    for node in model.graph:
        yield from node.outputs


def _silu_output(value: ir.Value, user: ir.Node, nodes: set[str]) -> str | None:
    """The output of the quantized SiLU, value * sigmoid(value), that `user` belongs to; else None."""
    mul = user
    if user.op_type == "Sigmoid":
        mul = user.outputs[0].uses()[0][0] if read_once(user.outputs[0]) else None
    if mul is None or mul.op_type != "Mul" or mul.name not in nodes:
        return None
    gates = [v for v in mul.inputs if v is not value]
    sigmoid = gates[0].producer() if len(gates) == 1 and len(mul.inputs) == 2 else None
    if sigmoid is None or sigmoid.op_type != "Sigmoid" or sigmoid.inputs[0] is not value:
        return None
    if sigmoid.name not in nodes or not read_once(gates[0]):
        return None
    return mul.outputs[0].name


def _silu(x: float) -> float:
    return x / (1.0 + math.exp(-x))


def _silu_flat_below(error: float, lo: float) -> float:
    """The x <= SILU_ARGMIN with silu(x) = -error (SILU_ARGMIN if SiLU never gets that deep),
    or `lo` if the tail above `lo` is not flat yet."""
    if lo >= SILU_ARGMIN or _silu(lo) <= -error:
        return lo
    if _silu(SILU_ARGMIN) >= -error:
        return SILU_ARGMIN
    return brentq(lambda x: _silu(x) + error, lo, SILU_ARGMIN)
