"""Fold inference-mode BatchNormalization into the Conv or ConvTranspose that feeds it."""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import (
    FusionPass,
    constant_weights,
    conv_bias,
    conv_with,
    replace_nodes,
)


class FoldBatchNormPass(FusionPass):
    """Folds an inference BatchNormalization into the Conv or ConvTranspose before it (weights
    and bias rescaled per output channel; a segmentation head's upsampling ConvTranspose is
    followed by one).

    Only when the weights and the statistics are constants, a ConvTranspose is not grouped, and
    the BatchNorm is the output's only reader; other BatchNorms stay."""

    def match(self, bn: ir.Node) -> ir.Node | None:
        """The Conv or ConvTranspose to fold `bn` into, if its weights and BatchNorm's statistics
        are constants."""
        if bn.op_type != "BatchNormalization" or len(bn.outputs) != 1 or bn.inputs[0] is None:
            return None
        if any(v is None or v.const_value is None for v in bn.inputs[1:5]):
            return None
        conv = bn.inputs[0].producer()
        if conv is None or len(bn.inputs[0].uses()) != 1 or bn.inputs[0].is_graph_output():
            return None
        foldable = conv.op_type == "Conv" or (
            conv.op_type == "ConvTranspose" and conv.attributes.get_int("group", 1) == 1
        )
        return conv if foldable and constant_weights(conv) else None

    def rewrite(self, graph: ir.Graph, bn: ir.Node, conv: ir.Node) -> None:
        gamma, beta, mean, var = (v.const_value.numpy().astype(np.float64) for v in bn.inputs[1:5])
        epsilon = bn.attributes["epsilon"].value if "epsilon" in bn.attributes else 1e-5
        factor = gamma / np.sqrt(var + epsilon)
        weight = conv.inputs[1].const_value.numpy()
        axis = 1 if conv.op_type == "ConvTranspose" else 0  # the output channels
        new_weight = weight * np.expand_dims(factor, [i for i in range(weight.ndim) if i != axis])
        new_bias = (conv_bias(conv) - mean) * factor + beta
        folded = conv_with(graph, conv, conv.inputs[0], new_weight, new_bias, "bnfolded")
        replace_nodes(graph, [conv, bn], folded)

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if self.match(node) is not None:
                raise ir.passes.PostconditionError(f"BatchNormalization {node.name} left unfolded")
