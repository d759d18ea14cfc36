"""A Conv's output scaled or shifted by constants per channel: into its weights and bias.

PP-LCNetV3 (the PP-OCRv4 detector's backbone) follows every Conv with a learnable scale and bias,
a Mul and an Add by constants that ONNX Runtime does not fuse; in INT8 each one is a QLinearMul
or QLinearAdd, a pass over the tensor.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import (
    FusionPass,
    channel_vector,
    constant_weights,
    conv_bias,
    conv_with,
    replace_nodes,
)


class FoldConvOutputAffinePass(FusionPass):
    """Folds Mul(Conv(x), c) into the Conv's weights and bias, and Add(Conv(x), c) into its
    bias, when c is a constant per output channel and the Conv's output has no other reader."""

    def match(self, node: ir.Node) -> tuple[ir.Node, np.ndarray] | None:
        """(the Conv, c per output channel) if `node` is a Mul or Add that can fold into it."""
        if node.op_type not in ("Mul", "Add") or len(node.inputs) != 2 or None in node.inputs:
            return None
        for index in (0, 1):
            conv = node.inputs[index].producer()
            if conv is None or conv.op_type != "Conv" or not constant_weights(conv):
                continue
            if len(conv.outputs[0].uses()) != 1 or conv.outputs[0].is_graph_output():
                continue
            weight = conv.inputs[1].const_value
            factor = channel_vector(node.inputs[1 - index], weight.shape[0], len(weight.shape))
            if factor is not None:
                return conv, factor
        return None

    def rewrite(self, graph: ir.Graph, node: ir.Node, found) -> None:
        conv, factor = found
        weight = conv.inputs[1].const_value.numpy().astype(np.float64)
        bias = conv_bias(conv)
        if node.op_type == "Mul":
            weight = weight * factor.reshape(-1, *[1] * (weight.ndim - 1))
            bias = bias * factor
        else:
            bias = bias + factor
        folded = conv_with(graph, conv, conv.inputs[0], weight, bias, node.op_type.lower())
        replace_nodes(graph, [conv, node], folded)

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if self.match(node) is not None:
                raise ir.passes.PostconditionError(f"{node.name}: left unfolded into its Conv")
