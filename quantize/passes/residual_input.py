"""Give a quantized Conv's input about 8 more bits: quantize it twice, the value and its rounding residual.

A uint8 input at one scale per tensor leaves weak activations (a shower's halo beside its
core) a few levels. For such a Conv the pass quantizes the rounding residual of its input,
r = x - dequantize(quantize(x)), which lies within half a step, at a step RESIDUAL_LEVELS times
finer, and adds the output of a second QLinearConv (the same int8 weights, no bias) on it:
conv(x) ~ conv(coarse x) + conv(r). The input's data movement (upsampling, windows) between the
source quantization and the Conv is run again on the residual's uint8 copy.

The second Conv's output is requantized on its worst case, sum |w| * |r|max per channel, so it
never saturates. The cost is one more integer convolution and its data movement.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import (
    add_initializer,
    dequantized_output,
    own_weights,
    read_by_fp32_only,
)
from quantize.plan import QuantPlan
from quantize.policy import RULES
from quantize.qparams import activation_qparams

RESIDUAL_LEVELS = 254  # |r| <= step / 2 spans 254 fine steps: zero point 128, levels 1..255
RESIDUAL_ZERO_POINT = 128


class ResidualInputPass(ir.passes.InPlacePass):
    """For each Conv in the plan's `residual` set, adds a second QLinearConv on the rounding
    residual of its input (see the module docstring); its output is read in float only."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def requires(self, model: ir.Model) -> None:
        for conv in self._refined(model):
            if conv.op_type != "Conv":
                raise ir.passes.PreconditionError(
                    f"{conv.name}: only a Conv input can be refined, not {conv.op_type}"
                )
            _input_chain(conv)
            read_by_fp32_only(conv, self.plan.nodes)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        refined = self._refined(model)
        for conv in refined:
            self._add_residual(model.graph, conv)
        return ir.passes.PassResult(model, modified=bool(refined))

    def _refined(self, model: ir.Model) -> list[ir.Node]:
        return [node for node in model.graph if node.name in self.plan.residual]

    def _add_residual(self, graph: ir.Graph, conv: ir.Node) -> None:
        source, chain = _input_chain(conv)
        name = conv.name
        step, zero_point = (v.const_value.numpy() for v in source.inputs[1:])
        dequantized = next(
            user for user, _ in source.outputs[0].uses() if user.op_type == "DequantizeLinear"
        )
        residual = ir.Node(
            "", "Sub", [source.inputs[0], dequantized.outputs[0]], name=f"{name}_input_residual"
        )
        fine = (
            add_initializer(
                graph, f"{name}_residual_scale", (step / RESIDUAL_LEVELS).astype(np.float32)
            ),
            add_initializer(graph, f"{name}_residual_zero_point", np.uint8(RESIDUAL_ZERO_POINT)),
        )
        copies = {source.inputs[0]: residual.outputs[0]}
        new_nodes = [residual]
        for node in chain:
            inputs = [copies.get(v, v) for v in node.inputs]
            if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                inputs[1:] = fine
            copy = ir.Node(
                node.domain,
                node.op_type,
                inputs,
                attributes=list(node.attributes.values()),
                name=f"{node.name}_residual",
            )
            copies[node.outputs[0]] = copy.outputs[0]
            new_nodes.append(copy)
        weights = own_weights(graph, conv, f"{name}_residual")
        residual_conv = ir.Node(
            "",
            "Conv",
            [copies[conv.inputs[0]], weights.outputs[0]],
            attributes=list(conv.attributes.values()),
            name=f"{name}_residual",
        )
        bound = float(
            np.max(_abs_weight_sums(weights)) * (RESIDUAL_LEVELS // 2) * step / RESIDUAL_LEVELS
        )
        out_scale, out_zero_point = activation_qparams(-bound, bound)
        s = add_initializer(graph, f"{name}_residual_output_scale", out_scale)
        z = add_initializer(graph, f"{name}_residual_output_zero_point", out_zero_point)
        q = ir.Node(
            "",
            "QuantizeLinear",
            [residual_conv.outputs[0], s, z],
            name=f"{name}_residual_QuantizeLinear",
        )
        dq = ir.Node(
            "", "DequantizeLinear", [q.outputs[0], s, z], name=f"{name}_residual_DequantizeLinear"
        )
        output = dequantized_output(conv).outputs[0]
        total = ir.Node("", "Add", [output, dq.outputs[0]], name=f"{name}_with_residual")
        new_nodes += [weights, residual_conv, q, dq, total]
        for node in new_nodes:
            node.outputs[0].name = node.name
        total.outputs[0].type, total.outputs[0].shape = output.type, output.shape
        for user, index in list(output.uses()):
            if user is not total:
                user.replace_input_with(index, total.outputs[0])
        graph.insert_after(output.producer(), new_nodes)


def _input_chain(conv: ir.Node) -> tuple[ir.Node, list[ir.Node]]:
    """The QuantizeLinear of the float tensor the Conv's input is moved from, and every node
    between it and the Conv (Q/DQ pairs and uint8 data movement, all at its scale), in graph order."""
    source, chain, pending = None, set(), [conv.inputs[0]]
    while pending:
        dequantize = pending.pop().producer()
        quantize = (
            dequantize.inputs[0].producer()
            if dequantize is not None and dequantize.op_type == "DequantizeLinear"
            else None
        )
        if quantize is None or quantize.op_type != "QuantizeLinear":
            raise ir.passes.PreconditionError(
                f"{conv.name}: its input is not a dequantized uint8 tensor"
            )
        chain |= {dequantize, quantize}
        mover = quantize.inputs[0].producer()
        if (
            mover is not None
            and mover.op_type in RULES
            and (RULES[mover.op_type].same_range or mover.op_type == "Concat")
        ):
            chain.add(mover)
            pending += list(mover.inputs[: len(mover.inputs) if mover.op_type == "Concat" else 1])
        elif source not in (None, quantize):
            raise ir.passes.PreconditionError(
                f"{conv.name}: its input is moved from more than one quantized tensor"
            )
        else:
            source = quantize
    scales = {
        (float(n.inputs[1].const_value.numpy()), int(n.inputs[2].const_value.numpy()))
        for n in chain
        if n.op_type.endswith("Linear")
    }
    if len(scales) != 1:
        raise ir.passes.PreconditionError(
            f"{conv.name}: its input's data movement changes the uint8 scale"
        )
    return source, [node for node in conv.graph if node in chain]


def _abs_weight_sums(dequantize: ir.Node) -> np.ndarray:
    """sum |w| over each output channel of the int8 weights a DequantizeLinear yields."""
    q, scale = (v.const_value.numpy() for v in dequantize.inputs[:2])
    per_channel = np.abs(q.astype(np.float64)).reshape(len(q), -1).sum(axis=1)
    return per_channel * np.broadcast_to(scale, per_channel.shape)
