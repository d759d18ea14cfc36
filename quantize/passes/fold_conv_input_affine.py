"""A Conv's input scaled and shifted by constants per channel: into the weights and bias of the
Convs that read it.

PP-LCNetV3 ends each hard-swish with a learnable scale and bias, a Mul and an Add by constants
that only Convs read. A scale passes through a Conv's zero padding, so it always folds; a shift
does not, so it folds only into Convs without padding and otherwise stays as one Add before
them: Conv(a * y + b) = Conv_{W * a}(y + b / a).
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import (
    FusionPass,
    add_initializer,
    channel_vector,
    constant_weights,
    conv_bias,
    conv_with,
    int_list,
    replace_nodes,
    uses_auto_pad,
)


class FoldConvInputAffinePass(FusionPass):
    """Folds y * a + b, y * a or y + b (a, b constants per channel) into the Convs that are the
    only readers of its result, as their input X. A shift stays as an Add(y, b / a) when a
    reader pads, unless a has a zero (then nothing folds)."""

    def match(self, node: ir.Node) -> tuple | None:
        """(y, a, b, the reading Convs, whether b folds into them, the affine's nodes), with a
        of ones or b of zeros where absent."""
        convs = _conv_readers(node)
        if convs is None:
            return None
        weight = convs[0].inputs[1].const_value
        affine = _affine(node, weight.shape[1] * _group(convs[0]), len(weight.shape))
        if affine is None:
            return None
        y, a, b, nodes = affine
        shift_folds = not b.any() or all(_unpadded(conv) for conv in convs)
        if not shift_folds and (np.all(a == 1) or np.any(a == 0)):
            return None
        return y, a, b, convs, shift_folds, nodes

    def rewrite(self, graph: ir.Graph, node: ir.Node, found) -> None:
        y, a, b, convs, shift_folds, nodes = found
        if not shift_folds:
            shift = add_initializer(graph, f"{node.name}_shift", _broadcastable(b / a, convs[0]))
            shift_node = ir.Node("", "Add", [y, shift], name=f"{node.name}_shift")
            graph.insert_after(node, shift_node)
            shift_node.outputs[0].type, shift_node.outputs[0].shape = y.type, y.shape
            y = shift_node.outputs[0]
        for conv in convs:
            weight = conv.inputs[1].const_value.numpy().astype(np.float64)
            bias = conv_bias(conv)
            if shift_folds:
                bias = bias + (weight * _per_input(b, conv)).sum(axis=tuple(range(1, weight.ndim)))
            folded = conv_with(graph, conv, y, weight * _per_input(a, conv), bias, "input_affine")
            replace_nodes(graph, [conv], folded)
        graph.remove(nodes, safe=True)

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if self.match(node) is not None:
                raise ir.passes.PostconditionError(f"{node.name}: left unfolded into its Convs")


def _conv_readers(node: ir.Node) -> list[ir.Node] | None:
    """The Convs reading `node`'s output as their input X, if they are its only readers and
    have constant weights and bias."""
    if node.op_type not in ("Mul", "Add") or node.outputs[0].is_graph_output():
        return None
    uses = node.outputs[0].uses()
    convs = [user for user, index in uses if user.op_type == "Conv" and index == 0]
    if not convs or len(convs) != len(uses):
        return None
    return convs if all(constant_weights(c) for c in convs) else None


def _affine(node: ir.Node, channels: int, rank: int):
    """(y, a, b, its nodes) for `node` = y * a + b, y * a or y + b; None otherwise."""
    ones, zeros = np.ones(channels), np.zeros(channels)
    factor = _by_constant(node, channels, rank)
    if factor is None:
        return None
    y, c = factor
    if node.op_type == "Mul":
        return y, c, zeros, [node]
    inner = y.producer()
    if (
        inner is not None
        and inner.op_type == "Mul"
        and len(y.uses()) == 1
        and not y.is_graph_output()
    ):
        scaled = _by_constant(inner, channels, rank)
        if scaled is not None:
            return scaled[0], scaled[1], c, [node, inner]
    return y, ones, c, [node]


def _by_constant(node: ir.Node, channels: int, rank: int) -> tuple[ir.Value, np.ndarray] | None:
    """(y, c) when `node` is a Mul or Add of y and a constant c per channel."""
    if len(node.inputs) != 2 or None in node.inputs:
        return None
    for index in (0, 1):
        c = channel_vector(node.inputs[1 - index], channels, rank)
        if c is not None and node.inputs[index].const_value is None:
            return node.inputs[index], c
    return None


def _broadcastable(vector: np.ndarray, conv: ir.Node) -> np.ndarray:
    """A term per input channel of `conv`, shaped to broadcast over its input and in its weights'
    dtype; one element when all are equal (ONNX Runtime adds a scalar much faster)."""
    weight = conv.inputs[1].const_value
    if np.all(vector == vector[0]):
        vector = vector[:1]
    else:
        vector = vector.reshape(-1, *[1] * (len(weight.shape) - 2))
    return vector.astype(weight.dtype.numpy())


def _group(conv: ir.Node) -> int:
    return conv.attributes["group"].value if "group" in conv.attributes else 1


def _per_input(vector: np.ndarray, conv: ir.Node) -> np.ndarray:
    """A factor per input channel laid out as the Conv's weights read it: (O, I / group, 1...)."""
    weight = conv.inputs[1].const_value
    out, per_group = weight.shape[0], weight.shape[1]
    groups = _group(conv)
    layout = np.repeat(vector.reshape(groups, per_group), out // groups, axis=0)
    return layout.reshape(out, per_group, *[1] * (len(weight.shape) - 2))


def _unpadded(conv: ir.Node) -> bool:
    if uses_auto_pad(conv) and conv.attributes["auto_pad"].value != "VALID":
        return False
    return not any(int_list(conv, "pads", []))
