"""A Conv's output scaled and shifted by constants per channel: into its weights and bias.

An inference BatchNormalization is such a scale and shift. So are the learnable scale and bias
PP-LCNetV3 (the PP-OCRv4 detector's backbone) puts after every Conv, a Mul and an Add by
constants that ONNX Runtime does not fuse: in INT8 each one is a QLinearMul or QLinearAdd, a pass
over the tensor. Paddle2ONNX writes a ConvTranspose's bias as an Add between it and its BatchNorm,
which the graph-order sweep folds first.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import (
    FusionPass,
    channel_vector,
    constant_weights,
    conv_bias,
    conv_with,
    output_channels,
    read_once,
    replace_nodes,
)

Affine = tuple[ir.Node, np.ndarray | None, np.ndarray]  # the Conv, scale (None: 1), shift


class FoldConvOutputAffinePass(FusionPass):
    """Folds BatchNormalization(Conv(x)), Mul(Conv(x), c) and Add(Conv(x), c), c a constant per
    output channel, into the Conv's (or ConvTranspose's) weights and bias, when the Conv's output
    has no other reader. A grouped ConvTranspose takes a shift only."""

    def match(self, node: ir.Node) -> Affine | None:
        """(the Conv, scale, shift per output channel) if `node` can fold into a Conv before it."""
        if node.op_type == "BatchNormalization":
            return _batchnorm(node)
        if node.op_type not in ("Mul", "Add") or len(node.inputs) != 2 or None in node.inputs:
            return None
        for index in (0, 1):
            conv = _foldable_conv(node.inputs[index])
            if conv is None or (node.op_type == "Mul" and not _scalable(conv)):
                continue
            rank = len(conv.inputs[1].const_value.shape)
            c = channel_vector(node.inputs[1 - index], output_channels(conv), rank)
            if c is not None:
                return (conv, c, np.zeros_like(c)) if node.op_type == "Mul" else (conv, None, c)
        return None

    def rewrite(self, graph: ir.Graph, node: ir.Node, found: Affine) -> None:
        conv, scale, shift = found
        weight = conv.inputs[1].const_value.numpy().astype(np.float64)
        bias = conv_bias(conv)
        if scale is not None:
            axis = 1 if conv.op_type == "ConvTranspose" else 0  # the output channels
            weight = weight * np.expand_dims(scale, [i for i in range(weight.ndim) if i != axis])
            bias = bias * scale
        folded = conv_with(graph, conv, conv.inputs[0], weight, bias + shift, node.op_type.lower())
        replace_nodes(graph, [conv, node], folded)

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if self.match(node) is not None:
                raise ir.passes.PostconditionError(f"{node.name}: left unfolded into its Conv")


def _batchnorm(bn: ir.Node) -> Affine | None:
    if len(bn.outputs) != 1 or bn.inputs[0] is None:
        return None
    if any(v is None or v.const_value is None for v in bn.inputs[1:5]):
        return None
    conv = _foldable_conv(bn.inputs[0])
    if conv is None or not _scalable(conv):
        return None
    gamma, beta, mean, var = (v.const_value.numpy().astype(np.float64) for v in bn.inputs[1:5])
    epsilon = bn.attributes["epsilon"].value if "epsilon" in bn.attributes else 1e-5
    scale = gamma / np.sqrt(var + epsilon)
    return conv, scale, beta - mean * scale


def _foldable_conv(value: ir.Value) -> ir.Node | None:
    """The Conv or ConvTranspose with constant weights whose output `value` is, read only once."""
    conv = value.producer()
    if conv is None or conv.op_type not in ("Conv", "ConvTranspose") or not constant_weights(conv):
        return None
    return conv if read_once(value) else None


def _scalable(conv: ir.Node) -> bool:
    """Can its output channels be scaled in its weights? A grouped ConvTranspose's weights are
    (in, out / group, ...): its output channels are not one axis."""
    return conv.op_type == "Conv" or conv.attributes.get_int("group", 1) == 1
