"""Fold inference-mode BatchNormalization into the Conv that feeds it."""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, replace_nodes


class FoldBatchNormPass(FusionPass):
    """Folds an inference BatchNormalization into the Conv before it (weights and bias rescaled).

    Only when the Conv's weights and the statistics are constants and the BatchNorm is the
    Conv output's only reader; other BatchNorms stay."""

    def match(self, bn: ir.Node) -> ir.Node | None:
        """The Conv to fold `bn` into, if its weights and BatchNorm's statistics are constants."""
        if bn.op_type != "BatchNormalization" or len(bn.outputs) != 1 or bn.inputs[0] is None:
            return None
        if any(v is None or v.const_value is None for v in bn.inputs[1:5]):
            return None
        conv = bn.inputs[0].producer()
        if (
            conv is None
            or conv.op_type != "Conv"
            or len(bn.inputs[0].uses()) != 1
            or bn.inputs[0].is_graph_output()
        ):
            return None
        weight_ok = conv.inputs[1] is not None and conv.inputs[1].const_value is not None
        bias_ok = (
            len(conv.inputs) < 3 or conv.inputs[2] is None or conv.inputs[2].const_value is not None
        )
        return conv if weight_ok and bias_ok else None

    def rewrite(self, graph: ir.Graph, bn: ir.Node, conv: ir.Node) -> None:
        gamma, beta, mean, var = (v.const_value.numpy().astype(np.float64) for v in bn.inputs[1:5])
        epsilon = bn.attributes["epsilon"].value if "epsilon" in bn.attributes else 1e-5
        factor = gamma / np.sqrt(var + epsilon)
        weight = conv.inputs[1].const_value.numpy()
        has_bias = len(conv.inputs) > 2 and conv.inputs[2] is not None
        bias = (
            conv.inputs[2].const_value.numpy()
            if has_bias
            else np.zeros(weight.shape[0], weight.dtype)
        )
        new_weight = (weight * factor.reshape(-1, *[1] * (weight.ndim - 1))).astype(weight.dtype)
        new_bias = ((bias - mean) * factor + beta).astype(weight.dtype)
        w_value = add_initializer(graph, f"{conv.name}_bnfolded_weight", new_weight)
        b_value = add_initializer(graph, f"{conv.name}_bnfolded_bias", new_bias)
        folded = ir.Node(
            "",
            "Conv",
            [conv.inputs[0], w_value, b_value],
            attributes=conv.attributes.values(),
            name=conv.name,
        )
        replace_nodes(graph, [conv, bn], folded)

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if self.match(node) is not None:
                raise ir.passes.PostconditionError(f"BatchNormalization {node.name} left unfolded")
