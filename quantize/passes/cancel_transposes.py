"""Remove Transpose pairs that undo each other: Transpose(Transpose(x, p), q) with q o p = identity."""

import onnx_ir as ir

from quantize.passes.rewrite import FusionPass


def _perm(node: ir.Node) -> list[int] | None:
    return list(node.attributes["perm"].value) if node.op_type == "Transpose" and "perm" in node.attributes else None


class CancelTransposesPass(FusionPass):
    def match(self, outer: ir.Node) -> ir.Node | None:
        q = _perm(outer)
        inner = outer.inputs[0].producer() if q is not None else None
        p = _perm(inner) if inner is not None else None
        if p is None or len(p) != len(q) or [p[i] for i in q] != list(range(len(q))):
            return None
        return inner

    def rewrite(self, graph: ir.Graph, outer: ir.Node, inner: ir.Node) -> None:
        restored = inner.inputs[0]
        result = outer.outputs[0]
        if result.is_graph_output():
            if restored.is_graph_input() or restored.is_graph_output():
                return
            restored.name, result.name = result.name, None
        ir.convenience.replace_all_uses_with(result, restored, replace_graph_outputs=True)
        graph.remove(outer, safe=True)
        if not inner.outputs[0].uses():
            graph.remove(inner, safe=True)
