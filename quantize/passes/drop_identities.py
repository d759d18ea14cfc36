"""Identity nodes of the main graph go: their readers read the Identity's input.

onnx-ir's IdentityEliminationPass also works inside If and Loop bodies, and there it fails
(onnx-ir 1.1.0) where two branches each return one outer value through an Identity, as the
Silero VAD's If branches do: the first elimination makes that outer value one branch's output,
and the second finds it "already an output of a different graph". The clean-up's passes read
only the main graph, so its Identities are the ones that matter; a body keeps its own.
"""

import onnx_ir as ir


class DropIdentitiesPass(ir.passes.InPlacePass):
    """Removes each Identity of the main graph, but one between a graph output and a value
    that already has a name of the graph's interface (an input, an initializer, an output):
    one of the two names would be lost."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        dropped = [node for node in model.graph if _droppable(node)]
        for node in dropped:
            _drop(model.graph, node)
        return ir.passes.PassResult(model, modified=bool(dropped))


def _droppable(node: ir.Node) -> bool:
    if node.op_type != "Identity" or node.domain != "" or node.inputs[0] is None:
        return False
    source = node.inputs[0]
    named_elsewhere = source.is_graph_input() or source.is_initializer() or source.is_graph_output()
    return not (node.outputs[0].is_graph_output() and named_elsewhere)


def _drop(graph: ir.Graph, node: ir.Node) -> None:
    source, output = node.inputs[0], node.outputs[0]
    if source.type is None:
        source.type = output.type
    renamed = output.is_graph_output()
    ir.convenience.replace_all_uses_with(output, source, replace_graph_outputs=True)
    if renamed:
        source.name = output.name  # the graph's output keeps its name
    graph.remove(node, safe=True)
