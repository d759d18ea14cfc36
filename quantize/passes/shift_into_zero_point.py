"""An INT8 Add of one constant before Convs: into the zero point the Convs read their input at.

FoldConvInputAffinePass leaves a learnable shift (PP-LCNetV3's, after each hard-swish) as
y + c before a padded Conv: the padding is zeros of y + c, not of y. In Q/DQ form that Add is
a QLinearAdd per block; and as y and y + c mostly share a scale (a shift moves a range, it does
not widen it), it rounds c to whole steps: up to half a step off in every element, all in the
same direction, which the Conv sums. Yet y + c at scale s and zero
point z is y at scale s and zero point z + c / s: so y is quantized straight at the scale of
y + c and the zero point z + k, k = round(c / s), and the Convs dequantize it as before (their
padding, the zero point z, is still 0 of y + c). What k * s misses of c, d = c - k * s, goes
into their biases as d * sum(W): exact but at the padded border."""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import (
    add_initializer,
    integer_weights_and_bias,
    per_tensor_dequantizer,
    raised_bias,
    set_bias,
)
from quantize.plan import QuantPlan
from quantize.qparams import QMAX_U8, QMIN_U8


class ShiftIntoZeroPointPass(ir.passes.InPlacePass):
    """Rewrites Q(y) -> DQ -> Add(c) -> Q(s, z) -> DQ(s, z) -> Convs into Q(y; s, z + k) ->
    DQ(s, z) -> Convs, their int32 biases raised by (c - k * s) * sum(W), where c is one
    constant, k = round(c / s), and no other node reads the values in between.

    A shift the range of y + c does not hold (the moved zero point would leave uint8) stays.

    Precondition: InsertQDQPass has run. Relus absorbed into y's clamp, Convs that get a residual
    input and a y that a widened Conv writes are left as they are: they rely on y's own zero
    point."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        found = [match for node in model.graph if (match := self._match(node)) is not None]
        for quantize_y, dequantizers, convs, shift in found:
            _rewrite(model.graph, quantize_y, dequantizers, convs, shift)
        return ir.passes.PassResult(model, modified=bool(found))

    def _match(self, add: ir.Node):
        """(y's QuantizeLinear, the Convs' DequantizeLinears, the Convs, c) for an Add y + c."""
        if add.op_type != "Add" or add.name not in self.plan.nodes or len(add.inputs) != 2:
            return None
        dequantizers = [per_tensor_dequantizer(value) for value in add.inputs]
        if None in dequantizers:
            return None
        constants = [dq for dq in dequantizers if dq.inputs[0].const_value is not None]
        if len(constants) != 1 or constants[0].inputs[0].const_value.size != 1:
            return None
        (dequantize_y,) = [dq for dq in dequantizers if dq is not constants[0]]
        quantize_y = dequantize_y.inputs[0].producer()
        if (
            quantize_y is None
            or quantize_y.op_type != "QuantizeLinear"
            or not _only_reader(quantize_y.outputs[0], dequantize_y)
            or not _only_reader(dequantize_y.outputs[0], add)
            or quantize_y.inputs[0].name in self.plan.absorbed.values()
            or _producer_name(quantize_y.inputs[0]) in self.plan.wide
        ):
            return None
        readers = _quantized_conv_readers(add.outputs[0])
        if readers is None or any(conv.name in self.plan.residual for conv in readers[1]):
            return None
        return quantize_y, *readers, _dequantized_constant(constants[0])


def _producer_name(value: ir.Value) -> str | None:
    producer = value.producer()
    return None if producer is None else producer.name


def _dequantized_constant(dequantize: ir.Node) -> float:
    q, scale, zero_point = (v.const_value.numpy().astype(np.float64) for v in dequantize.inputs)
    return float(((q - zero_point) * scale).item())


def _only_reader(value: ir.Value, node: ir.Node) -> bool:
    return not value.is_graph_output() and [user for user, _ in value.uses()] == [node]


def _quantized_conv_readers(value: ir.Value) -> tuple[list[ir.Node], list[ir.Node]] | None:
    """(DequantizeLinears, Convs) when `value` is only quantized once and then read as the
    input X of Convs with dequantized int8 weights and int32 biases."""
    uses = value.uses()
    if value.is_graph_output() or len(uses) != 1 or uses[0][0].op_type != "QuantizeLinear":
        return None
    quantized = uses[0][0].outputs[0]
    dequantizers = [user for user, _ in quantized.uses()]
    if quantized.is_graph_output() or any(d.op_type != "DequantizeLinear" for d in dequantizers):
        return None
    convs = []
    for dq in dequantizers:
        if dq.outputs[0].is_graph_output():
            return None
        for user, index in dq.outputs[0].uses():
            if user.op_type != "Conv" or index != 0 or not integer_weights_and_bias(user):
                return None
            convs.append(user)
    return (dequantizers, convs) if convs else None


def _rewrite(graph, quantize_y, dequantizers, convs, shift) -> None:
    scale, zero_point = (v.const_value.numpy() for v in dequantizers[0].inputs[1:])
    shifted = int(zero_point) + round(shift / float(scale))
    if not QMIN_U8 <= shifted <= QMAX_U8:
        return  # c outside the range of y + c: a clipped zero point would miss more than a step
    missed = shift - (shifted - int(zero_point)) * float(scale)
    name = quantize_y.inputs[0].name
    quantize_y.replace_input_with(1, add_initializer(graph, f"{name}_shifted_scale", scale))
    quantize_y.replace_input_with(
        2, add_initializer(graph, f"{name}_shifted_zero_point", np.uint8(shifted))
    )
    for dq in dequantizers:
        dq.replace_input_with(0, quantize_y.outputs[0])
    for conv in convs:
        _raise_bias(graph, conv, missed)


def _raise_bias(graph: ir.Graph, conv: ir.Node, amount: float) -> None:
    """Raises the Conv's int32 bias as if every input element were `amount` higher (so, as if
    the shift were not rounded)."""
    limit = np.iinfo(np.int32).max
    raised = np.clip(raised_bias(conv, amount), -limit, limit).astype(np.int32)
    set_bias(graph, conv, raised, f"{conv.name}_bias_shifted")
