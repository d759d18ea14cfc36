"""Evaluate nodes whose inputs are all constants and store the results as initializers."""

import numpy as np
import onnx_ir as ir
from onnx.reference import ReferenceEvaluator

from quantize.passes.rewrite import add_initializer

MAX_FOLDED_ELEMENTS = 10_000_000
NEVER_FOLD = {
    "QuantizeLinear",
    "DequantizeLinear",
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
}


class FoldConstantsPass(ir.passes.InPlacePass):
    """Replaces each node whose inputs are all constants by an initializer holding its output.

    Left alone: graph outputs, Q/DQ and random ops, nodes with subgraphs, other domains, and
    results over MAX_FOLDED_ELEMENTS elements."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        folded = 0
        for node in list(model.graph):
            if self._foldable(node) and self._fold(model.graph, node):
                folded += 1
        return ir.passes.PassResult(model, modified=folded > 0)

    @staticmethod
    def _foldable(node: ir.Node) -> bool:
        if node.domain not in ("", "ai.onnx") or node.op_type in NEVER_FOLD:
            return False
        if any(
            attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
            for attr in node.attributes.values()
        ):
            return False
        if any(out.is_graph_output() for out in node.outputs):
            return False
        return all(v is None or v.const_value is not None for v in node.inputs)

    @staticmethod
    def _fold(graph: ir.Graph, node: ir.Node) -> bool:
        proto = ir.serde.serialize_node(node)
        feeds = {v.name: v.const_value.numpy() for v in node.inputs if v is not None}
        try:
            results = ReferenceEvaluator(proto).run(None, feeds)
        except Exception:  # an op the reference runtime lacks stays as it is
            return False
        if any(np.asarray(r).size > MAX_FOLDED_ELEMENTS for r in results):
            return False
        for out, result in zip(node.outputs, results):
            name, out.name = out.name, None
            ir.convenience.replace_all_uses_with(out, add_initializer(graph, name, result))
        graph.remove(node, safe=True)
        return True
