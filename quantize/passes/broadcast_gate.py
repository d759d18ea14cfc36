"""A planned Mul of a feature map by a per-channel gate reads the gate copied to the map's shape.

A squeeze-and-excitation block multiplies x (N, C, H, W) by a gate g (N, C, 1, 1). ONNX Runtime
runs that QLinearMul on the NHWC data of the integer Convs around it, where g broadcasts along
the innermost axis: the kernel then multiplies one run of C values at a time, and in the
PP-OCRv4 detector two such gates at 160 x 160 cost more than its other 33 QLinearMuls together
(docs/zoo.md). Copied to x's shape first (an Expand on NHWC data, runs of C bytes), the
multiplication is one run. The copy goes through `copied_in_nhwc`, whose Transposes ORT's
transpose optimizer cancels, at the gate's own scale (exact).
"""

import onnx_ir as ir

from quantize.passes.rewrite import TO_NCHW, NodeChain, copied_in_nhwc, nhwc_shape
from quantize.plan import QuantPlan


class BroadcastGatePass(ir.passes.InPlacePass):
    """Rewrites each planned Mul of DQ(x) by DQ(g), g of shape (N, C, 1, 1) and x (N, C, H, W)
    with H x W > 1, to read g -> Transpose -> Expand to x's NHWC shape -> Transpose instead of g,
    with a Q/DQ pair at g's scale after each step."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        planned = (n for n in model.graph if n.name in self.plan.nodes)
        chosen = {node: gate for node in planned if (gate := _gate_input(node)) is not None}
        for node, gate in chosen.items():
            _rewrite(model.graph, node, gate)
        return ir.passes.PassResult(model, modified=bool(chosen))

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if node.name in self.plan.nodes and _gate_input(node) is not None:
                raise ir.passes.PostconditionError(f"{node.name}: it still broadcasts a gate")


def _gate_input(node: ir.Node) -> int | None:
    """The index of the gate input where `node` is a Mul of two dequantized activations, one a
    map (N, C, H, W) with H x W > 1 and the other its gate (N, C, 1, 1)."""
    if node.op_type != "Mul" or len(node.inputs) != 2:
        return None
    if any(v is None or not _dequantized_activation(v) for v in node.inputs):
        return None
    for gate, data in ((0, 1), (1, 0)):
        g, x = (node.inputs[i].shape for i in (gate, data))
        if g is None or x is None or len(g) != 4 or len(x) != 4:
            continue
        if list(g[2:]) == [1, 1] and x[2:] != g[2:] and g[1] == x[1] and g[1] != 1:
            return gate
    return None


def _dequantized_activation(value: ir.Value) -> bool:
    producer = value.producer()
    return (
        producer is not None
        and producer.op_type == "DequantizeLinear"
        and producer.inputs[0].const_value is None
    )


def _rewrite(graph: ir.Graph, node: ir.Node, gate: int) -> None:
    chain = NodeChain(graph, f"{node.name}_gate")
    data = node.inputs[1 - gate].producer().inputs[0]
    copied = copied_in_nhwc(
        chain, node.inputs[gate], [("Expand", [nhwc_shape(chain, data, [1, 1, 1, 1])])]
    )
    full = chain.node("Transpose", [copied], "to_nchw", perm=TO_NCHW)
    full.type = node.inputs[gate].type
    graph.insert_before(node, chain.nodes)
    node.replace_input_with(gate, full)
