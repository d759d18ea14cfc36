"""A planned HardSwish becomes two ops ONNX Runtime runs on uint8: QLinearAdd and QLinearMul.

ORT has no quantized HardSwish: between INT8 neighbours one costs a DequantizeLinear, float
passes and a QuantizeLinear, and the layout changes of the integer convolutions around it.
hard-swish(x) = x * clip(x + 3, 0, 6) / 6. The Add of 3 is quantized over [0, 6] with zero point
0, so the uint8 clamp is the Clip; that gate is read back at a sixth of its scale, which is the
/ 6, so the Mul reads x * gate and writes the HardSwish's output at its planned range.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import NodeChain, replace_nodes
from quantize.plan import QuantPlan
from quantize.qparams import QMAX_U8, quantize_constant

GATE_RANGE = 6.0  # clip(x + 3, 0, 6)


class HardSwishToQLinearPass(ir.passes.InPlacePass):
    """Rewrites each planned HardSwish, its input dequantized by InsertQDQPass, into
    DQ(x) + 3 -> Q(gate, 6/255) -> DQ(gate, 1/255) -> DQ(x) * gate, the Mul under its name.

    Precondition: InsertQDQPass has run (a planned HardSwish reads a DequantizeLinear)."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def requires(self, model: ir.Model) -> None:
        for node in self._planned(model):
            producer = node.inputs[0].producer()
            if producer is None or producer.op_type != "DequantizeLinear":
                raise ir.passes.PreconditionError(f"{node.name}: input is not dequantized")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        planned = self._planned(model)
        for node in planned:
            _rewrite(model.graph, node)
        return ir.passes.PassResult(model, modified=bool(planned))

    def ensures(self, model: ir.Model) -> None:
        for node in self._planned(model):
            raise ir.passes.PostconditionError(f"{node.name}: a planned HardSwish is left")

    def _planned(self, model: ir.Model) -> list[ir.Node]:
        return [n for n in model.graph if n.op_type == "HardSwish" and n.name in self.plan.nodes]


def _rewrite(graph: ir.Graph, node: ir.Node) -> None:
    x = node.inputs[0]
    chain = NodeChain(graph, node.name)
    gate_scale = np.float32(GATE_RANGE / QMAX_U8)
    zero = chain.const("gate_zero_point", np.uint8(0))
    q, scale, zero_point = quantize_constant(np.float32(3.0))  # exactly 3: 255 steps of 3/255
    three = chain.node(
        "DequantizeLinear",
        [
            chain.const("three_quantized", q),
            chain.const("three_scale", scale),
            chain.const("three_zero_point", zero_point),
        ],
        "three",
    )
    shifted = chain.node("Add", [x, three], "add_three")
    gate = chain.node(
        "QuantizeLinear", [shifted, chain.const("gate_scale", gate_scale), zero], "gate"
    )
    sixth = chain.const("gate_scale_sixth", np.float32(gate_scale / GATE_RANGE))
    gate = chain.node("DequantizeLinear", [gate, sixth, zero], "gate_sixth")
    three.type = shifted.type = gate.type = x.type
    shifted.shape = gate.shape = x.shape
    graph.insert_before(node, chain.nodes)
    name = node.name
    mul = ir.Node("", "Mul", [x, gate])
    replace_nodes(graph, [node], mul)
    mul.name = name
