"""Insert QuantizeLinear/DequantizeLinear pairs that ONNX Runtime fuses into integer kernels.

For each planned node: float activation inputs and outputs get a uint8 Q -> DQ pair (one per
tensor, shared by all consumers); the weight becomes an initializer in the plan's weight format
(int8, or uint8 around 128) with per-channel scales behind a DequantizeLinear; the bias becomes
int32 at scale s_input * s_weight. A depthwise Conv's paired or int7 weights take all of int8's
levels: their kernel cannot saturate (`weight_format`).
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import add_initializer
from quantize.plan import QuantPlan
from quantize.policy import FLOAT_OUTPUT_FUSIONS, RULES, is_float
from quantize.qparams import (
    activation_qparams,
    bias_weight_scale_floor,
    quantize_bias,
    quantize_constant,
    quantize_weight,
)
from quantize.target import WEIGHT_FORMATS, WeightFormat

# ORT's WeightBiasQuantization rounds the float weight of these ops to per-tensor full-range int8
# when their input comes from a DequantizeLinear with one scale: an FP32 node of this kind reads a
# DequantizeLinear of its own whose scale is repeated per channel (the same values, no match).
WEIGHT_QUANTIZED_BY_ORT = {"Conv", "ConvTranspose", "Gemm"}


class InsertQDQPass(ir.passes.InPlacePass):
    """Carries out a QuantPlan: uint8 Q/DQ pairs on the planned nodes' activations, per-channel
    weights in the plan's weight format, int32 biases.

    Precondition: every planned activation has a range. FP32 Convs and Gemms that share a
    quantized weight get their own per-channel DequantizeLinear."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        self._dequantized: dict[str, ir.Value] = {}
        self._weight_scales: dict[str, np.ndarray] = {}
        planned = [node for node in graph if node.name in self.plan.nodes]
        for node in planned:
            self._quantize_inputs(graph, node)
        for node in planned:
            if RULES[node.op_type].dynamic:
                continue  # its output is float: a quantized reader quantizes it as its input
            for out in node.outputs:
                if not is_float(out) or out.name not in self.plan.ranges:
                    continue
                if node.op_type in FLOAT_OUTPUT_FUSIONS and not self._read_quantized(out):
                    continue  # no requantization: ORT runs it as an integer GEMM with a float output
                if not out.is_graph_output():
                    self._route_through_qdq(graph, out)
                else:
                    self._quantize_graph_output(graph, out)
        for name, dequantized in list(self._dequantized.items()):
            self._shield_fp32_readers(graph, name, dequantized)
        return ir.passes.PassResult(model, modified=bool(planned))

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            rule = RULES.get(node.op_type)
            if (
                node.name in self.plan.nodes
                and rule.weight is not None
                and len(node.inputs) > rule.weight
            ):
                producer = node.inputs[rule.weight].producer()
                if node.op_type != "MatMul" and (
                    producer is None or producer.op_type != "DequantizeLinear"
                ):
                    raise ir.passes.PostconditionError(
                        f"{node.name}: weight is not dequantized int8"
                    )

    def _quantize_inputs(self, graph: ir.Graph, node: ir.Node) -> None:
        rule = RULES[node.op_type]
        source = node.inputs[0]  # the bias scale needs its range, before it is rewired to a DQ
        for index, value in enumerate(list(node.inputs)):
            if value is None:
                continue
            if index == rule.weight and value.const_value is not None and is_float(value):
                node.replace_input_with(index, self._weight(graph, node, value, source))
            elif index == rule.bias and value.const_value is not None:
                bias = self._bias(graph, node, value, source)
                if bias is not None:
                    node.replace_input_with(index, bias)
            elif index in rule.activations and is_float(value) and value.name in self.plan.ranges:
                node.replace_input_with(index, self._qdq(graph, value))
            elif (
                index in rule.activations
                and rule.constant_operands
                and is_float(value)
                and value.const_value is not None
            ):
                q, scale, zero_point = quantize_constant(value.const_value.numpy())
                node.replace_input_with(
                    index,
                    self._dequantize_constant(
                        graph, f"{node.name}_operand{index}", q, scale, zero_point, None, value
                    ),
                )

    def _read_quantized(self, value: ir.Value) -> bool:
        """Does a planned node read `value` as a quantized activation?"""
        return any(
            user.name in self.plan.nodes and index in RULES[user.op_type].activations
            for user, index in value.uses()
        )

    def _route_through_qdq(self, graph: ir.Graph, value: ir.Value) -> None:
        dequantized = self._qdq(graph, value)
        quantize_node = dequantized.producer().inputs[0].producer()
        for user, index in list(value.uses()):
            if user is not quantize_node:
                user.replace_input_with(index, dequantized)

    def _shield_fp32_readers(self, graph: ir.Graph, name: str, dequantized: ir.Value) -> None:
        readers = [
            user
            for user, index in dequantized.uses()
            if index == 0
            and user.op_type in WEIGHT_QUANTIZED_BY_ORT
            and user.name not in self.plan.nodes
            and len(user.inputs) > 1
            and user.inputs[1] is not None
            and user.inputs[1].const_value is not None
        ]
        channels = (
            dequantized.shape[1]
            if dequantized.shape is not None and len(dequantized.shape) > 1
            else None
        )
        if not readers or not isinstance(channels, int) or channels < 2:
            return
        dq = dequantized.producer()
        scale, zero_point = (v.const_value.numpy() for v in dq.inputs[1:])
        per_channel = ir.Node(
            "",
            "DequantizeLinear",
            [
                dq.inputs[0],
                add_initializer(graph, f"{name}_scale_per_channel", np.full(channels, scale)),
                add_initializer(
                    graph, f"{name}_zero_point_per_channel", np.full(channels, zero_point)
                ),
            ],
            attributes=[ir.AttrInt64("axis", 1)],
            name=f"{name}_DequantizeLinear_per_channel",
        )
        per_channel.outputs[0].name = f"{name}_dequantized_per_channel"
        per_channel.outputs[0].type, per_channel.outputs[0].shape = (
            dequantized.type,
            dequantized.shape,
        )
        graph.insert_after(dq, per_channel)
        for reader in readers:
            reader.replace_input_with(0, per_channel.outputs[0])

    def _quantize_graph_output(self, graph: ir.Graph, value: ir.Value) -> None:
        """ORT fuses a Conv into QLinearConv only with a Q after it: end with Q -> DQ, under
        the output's own name."""
        name = value.name
        self._route_through_qdq(graph, value)
        dequantized = self._dequantized[name]
        index = list(graph.outputs).index(value)
        value.name = f"{name}_before_quantization"
        dequantized.name = name
        graph.outputs[index] = dequantized

    def _qdq(self, graph: ir.Graph, value: ir.Value) -> ir.Value:
        if value.name in self._dequantized:
            return self._dequantized[value.name]
        scale, zero_point = activation_qparams(*self.plan.ranges[value.name])
        s = add_initializer(graph, f"{value.name}_scale", scale)
        z = add_initializer(graph, f"{value.name}_zero_point", zero_point)
        q = ir.Node("", "QuantizeLinear", [value, s, z], name=f"{value.name}_QuantizeLinear")
        dq = ir.Node(
            "", "DequantizeLinear", [q.outputs[0], s, z], name=f"{value.name}_DequantizeLinear"
        )
        q.outputs[0].name, dq.outputs[0].name = (
            f"{value.name}_quantized",
            f"{value.name}_dequantized",
        )
        dq.outputs[0].type, dq.outputs[0].shape = value.type, value.shape
        producer = value.producer()
        if producer is None:
            graph.insert_before(graph.node(0), [q, dq])
        else:
            graph.insert_after(producer, [q, dq])
        self._dequantized[value.name] = dq.outputs[0]
        return dq.outputs[0]

    def _weight(
        self, graph: ir.Graph, node: ir.Node, value: ir.Value, source: ir.Value
    ) -> ir.Value:
        weight = value.const_value.numpy()
        axis = weight_channel_axis(node, weight)
        q, scale, zero_point = quantized_weight(
            node, weight, self.plan.weights, self._bias_floor(node, weight, axis, source)
        )
        self._weight_scales[node.name] = scale
        return self._dequantize_constant(
            graph, f"{node.name}_weight", q, scale, zero_point, axis, value
        )

    def _bias_floor(
        self, node: ir.Node, weight: np.ndarray, axis: int | None, source: ir.Value
    ) -> np.ndarray | float:
        """A weight scale small enough to overflow the int32 bias widens instead (a weak input
        under a large bias: the bias dominates the output anyway)."""
        index = RULES[node.op_type].bias
        if (
            index is None
            or len(node.inputs) <= index
            or node.inputs[index] is None
            or node.inputs[index].const_value is None
            or source is None
            or source.name not in self.plan.ranges
        ):
            return 0.0
        floor = bias_weight_scale_floor(
            node.inputs[index].const_value.numpy(),
            activation_qparams(*self.plan.ranges[source.name])[0],
        )
        return (
            floor
            if axis is not None and floor.shape == (weight.shape[axis],)
            else float(floor.max(initial=0.0))
        )

    def _bias(
        self, graph: ir.Graph, node: ir.Node, value: ir.Value, source: ir.Value
    ) -> ir.Value | None:
        bias = value.const_value.numpy()
        weight_scale = self._weight_scales.get(node.name)
        if (
            weight_scale is None
            or bias.ndim != 1
            or weight_scale.size != bias.size
            or source.name not in self.plan.ranges
        ):
            return None
        input_scale, _ = activation_qparams(*self.plan.ranges[source.name])
        q, scale = quantize_bias(bias, input_scale, weight_scale)
        return self._dequantize_constant(
            graph, f"{node.name}_bias", q, scale, np.zeros_like(scale, np.int32), 0, value
        )

    def _dequantize_constant(
        self, graph, name, q, scale, zero_point, axis, like: ir.Value
    ) -> ir.Value:
        inputs = [
            add_initializer(graph, f"{name}_quantized", q),
            add_initializer(graph, f"{name}_scale", scale),
            add_initializer(graph, f"{name}_zero_point", zero_point),
        ]
        attributes = [ir.AttrInt64("axis", axis)] if axis is not None and np.size(scale) > 1 else []
        dq = ir.Node(
            "", "DequantizeLinear", inputs, attributes=attributes, name=f"{name}_DequantizeLinear"
        )
        dq.outputs[0].name = f"{name}_dequantized"
        dq.outputs[0].type, dq.outputs[0].shape = like.type, like.shape
        graph.insert_before(graph.node(0), dq)
        return dq.outputs[0]


def weight_format(node: ir.Node, weight: np.ndarray, fmt: WeightFormat) -> WeightFormat:
    """`fmt`, but full int8 in place of paired or int7 for a depthwise Conv (one input and one
    output channel per group): MLAS runs it in its own kernel, which widens u8 and s8 to int16
    before it multiplies, on every x86 path, so no pair of products saturates (paired and int7
    guard the GEMM kernels' int16 pairs)."""
    group = node.attributes.get_int("group", 1)
    depthwise = node.op_type == "Conv" and group > 1 and weight.shape[:2] == (group, 1)
    return WEIGHT_FORMATS["int8"] if depthwise and fmt.zero_point == 0 else fmt


def quantized_weight(
    node: ir.Node, weight: np.ndarray, fmt: WeightFormat, min_scale: np.ndarray | float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`node`'s `weight` as InsertQDQ writes it: per output channel where ORT takes a scale per
    channel, in `fmt` (`weight_format`), its pairs bounded along MLAS's reduction order."""
    return quantize_weight(
        weight,
        weight_channel_axis(node, weight),
        weight_format(node, weight, fmt),
        min_scale,
        lambda array: reduction_rows(node, array),
    )


def reduction_rows(node: ir.Node, weight: np.ndarray) -> np.ndarray:
    """`weight` as MLAS's integer kernels reduce it: a row per output channel (per column of a
    GEMM's B), along the reduction in their order. A Conv's filter is reordered to kernel
    positions outermost and input channels innermost; a GEMM reduces over B's rows."""
    if node.op_type == "Conv":
        return np.moveaxis(weight, 1, -1).reshape(weight.shape[0], -1)
    if weight.ndim == 2 and weight_channel_axis(node, weight) == 0:  # Gemm with transB
        return weight
    return np.moveaxis(weight, -2, -1).reshape(-1, weight.shape[-2])


def weight_channel_axis(node: ir.Node, weight: np.ndarray) -> int | None:
    """The output-channel axis of the weight, or None where one scale is all ORT takes."""
    if node.op_type == "Conv":
        return 0
    if weight.ndim != 2:
        return None
    if node.op_type == "Gemm":
        trans_b = node.attributes["transB"].value if "transB" in node.attributes else 0
        return 0 if trans_b else 1
    return 1
