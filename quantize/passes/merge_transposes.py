"""Merge consecutive Transposes into one, and drop it when the two undo each other."""

import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, transpose_perm


class MergeTransposesPass(FusionPass):
    """Merges Transpose -> Transpose into one Transpose, or removes both when they cancel.

    Only when the first Transpose's output has no other reader."""

    def match(self, outer: ir.Node) -> ir.Node | None:
        q = transpose_perm(outer)
        inner = outer.inputs[0].producer() if q is not None else None
        p = transpose_perm(inner)
        return (
            inner
            if p is not None and len(p) == len(q) and len(inner.outputs[0].uses()) == 1
            else None
        )

    def rewrite(self, graph: ir.Graph, outer: ir.Node, inner: ir.Node) -> None:
        p, q = transpose_perm(inner), transpose_perm(outer)
        composed = [p[i] for i in q]
        source, result = inner.inputs[0], outer.outputs[0]
        if composed != list(range(len(composed))):
            outer.attributes["perm"] = ir.AttrInt64s("perm", composed)
            outer.replace_input_with(0, source)
        elif result.is_graph_output() and (source.is_graph_input() or source.is_graph_output()):
            return
        else:
            if result.is_graph_output():
                source.name, result.name = result.name, None
            ir.convenience.replace_all_uses_with(result, source, replace_graph_outputs=True)
            graph.remove(outer, safe=True)
        graph.remove(inner, safe=True)
