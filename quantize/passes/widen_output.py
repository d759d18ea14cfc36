"""Give a quantized Conv whose output only FP32 ops read about 4 more bits near zero.

ORT's QLinearConv always requantizes its output to uint8 at one scale per tensor. Where that
output spans decades (a generator's last convolutions: a shower's core and its halo 1000x
weaker), the halo gets a few levels and its rounding noise decides the shower's width. The
pass adds a second QLinearConv on the same uint8 input whose output scale is FINE_RATIO times
finer (so it saturates outside the central 1/FINE_RATIO of the range) and merges the two in
float: fine + (coarse - clip(coarse, fine range)), the fine value inside its range and the
coarse one outside. The cost is one more integer convolution and three float elementwise ops.
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

FINE_RATIO = 16
UINT8_LEVELS = (0, 255)


class WidenOutputPass(ir.passes.InPlacePass):
    """For each Conv in the plan's `wide` set, adds a second QLinearConv requantized FINE_RATIO
    times finer and merges the two in float (see the module docstring)."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def requires(self, model: ir.Model) -> None:
        for conv in self._widened(model):
            if conv.op_type != "Conv":
                raise ir.passes.PreconditionError(
                    f"{conv.name}: only a Conv output can be widened, not {conv.op_type}"
                )
            read_by_fp32_only(conv, self.plan.nodes)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        widened = self._widened(model)
        for conv in widened:
            self._widen(model.graph, conv)
        return ir.passes.PassResult(model, modified=bool(widened))

    def _widened(self, model: ir.Model) -> list[ir.Node]:
        return [node for node in model.graph if node.name in self.plan.wide]

    def _widen(self, graph: ir.Graph, conv: ir.Node) -> None:
        dequantize = dequantized_output(conv)
        coarse = dequantize.outputs[0]
        scale, zero_point = (v.const_value.numpy() for v in dequantize.inputs[1:])
        fine_scale = (scale / FINE_RATIO).astype(np.float32)
        low, high = (
            np.array(UINT8_LEVELS, np.float32) - zero_point.astype(np.float32)
        ) * fine_scale
        name = conv.name
        weights = own_weights(graph, conv, f"{name}_fine")
        fine_conv = ir.Node(
            "",
            "Conv",
            [conv.inputs[0], weights.outputs[0], *conv.inputs[2:]],
            attributes=list(conv.attributes.values()),
            name=f"{name}_fine",
        )
        s = add_initializer(graph, f"{name}_fine_scale", fine_scale)
        q = ir.Node(
            "",
            "QuantizeLinear",
            [fine_conv.outputs[0], s, dequantize.inputs[2]],
            name=f"{name}_fine_QuantizeLinear",
        )
        dq = ir.Node(
            "",
            "DequantizeLinear",
            [q.outputs[0], s, dequantize.inputs[2]],
            name=f"{name}_fine_DequantizeLinear",
        )
        clip = ir.Node(
            "",
            "Clip",
            [
                coarse,
                add_initializer(graph, f"{name}_fine_low", low),
                add_initializer(graph, f"{name}_fine_high", high),
            ],
            name=f"{name}_coarse_in_fine_range",
        )
        excess = ir.Node("", "Sub", [coarse, clip.outputs[0]], name=f"{name}_beyond_fine_range")
        merged = ir.Node("", "Add", [dq.outputs[0], excess.outputs[0]], name=f"{name}_widened")
        for node in (fine_conv, q, dq, clip, excess, merged):
            node.outputs[0].name = node.name
        merged.outputs[0].type, merged.outputs[0].shape = coarse.type, coarse.shape
        for user, index in list(coarse.uses()):
            if user not in (clip, excess):
                user.replace_input_with(index, merged.outputs[0])
        graph.insert_after(dequantize, [weights, fine_conv, q, dq, clip, excess, merged])
