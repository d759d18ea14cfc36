"""Move a Transpose up through layout-blind ops to the Transpose before them, and merge the two.

Transpose(p) -> ops -> Transpose(q) computes what Transpose(p then q) -> the same ops does, with
their axes renumbered, when every op between is blind to the layout: elementwise (alone, or
with a constant operand, which is transposed too), a Slice (its axes renumbered) or a Reshape
that merges consecutive axes (its groups reordered). One data movement is left of two, and none
where they cancel. In the 3DGAN generator, the pixel shuffle of the upsampling fold ends
channels-first, a LeakyRelu (and BatchNorm's Mul and Add) follow, and the next Conv3D fold
starts channels-last: the largest tensor of the graph was moved twice.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, read_once, transpose_perm

UNARY = {
    "Abs",
    "Elu",
    "Erf",
    "HardSigmoid",
    "LeakyRelu",
    "Neg",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softplus",
    "Tanh",
}
WITH_CONSTANT = {"Add", "Div", "Mul", "Sub"}


def _const(value: ir.Value | None) -> np.ndarray | None:
    return None if value is None or value.const_value is None else value.const_value.numpy()


class HoistTransposePass(FusionPass):
    """Rewrites Transpose -> layout-blind ops -> Transpose as one Transpose -> the ops (see the
    module docstring). Only where each value between is read by the next op alone."""

    def match(self, outer: ir.Node) -> tuple[ir.Node, list[ir.Node]] | None:
        """(the inner Transpose, the ops between it and `outer`, nearest `outer` first)."""
        if transpose_perm(outer) is None:
            return None
        between, node = [], outer.inputs[0].producer()
        while node is not None and transpose_perm(node) is None:
            if not read_once(node.outputs[0]) or not _layout_blind(node):
                return None
            between.append(node)
            node = node.inputs[0].producer()
        if node is None or not between or not read_once(node.outputs[0]):
            return None
        return node, between

    def rewrite(self, graph: ir.Graph, outer: ir.Node, found) -> None:
        inner, between = found
        q = transpose_perm(outer)
        for op in between:  # from outer up: q becomes the permutation of op's input
            q = _renumber(graph, op, q)
        composed = [transpose_perm(inner)[i] for i in q]
        first = between[-1]
        if composed == list(range(len(composed))):
            first.replace_input_with(0, inner.inputs[0])
            graph.remove(inner, safe=True)
        else:
            inner.attributes["perm"] = ir.AttrInt64s("perm", composed)
            inner.outputs[0].shape = None
        for op in between:
            op.outputs[0].shape = None  # permuted: shape inference reads them again
        last, result = between[0].outputs[0], outer.outputs[0]
        last.name, result.name = result.name, None
        ir.convenience.replace_all_uses_with(result, last, replace_graph_outputs=True)
        graph.remove(outer, safe=True)


def _layout_blind(node: ir.Node) -> bool:
    if node.op_type in UNARY:
        return len(node.inputs) == 1
    if node.op_type in WITH_CONSTANT:
        constant, rank = _const(node.inputs[1]), _rank(node)
        return constant is not None and rank is not None and constant.ndim <= rank
    if node.op_type == "Slice":
        return all(_const(v) is not None for v in node.inputs[1:]) and _rank(node) is not None
    if node.op_type == "Reshape":
        return _merged_groups(node) is not None
    return False


def _rank(node: ir.Node) -> int | None:
    shape = node.inputs[0].shape
    return None if shape is None else len(shape)


def _merged_groups(reshape: ir.Node) -> list[list[int]] | None:
    """The input axes each output axis of `reshape` merges (consecutive, in order), or None if it
    does more than merge. A -1 in its shape takes one input axis whole; 0 is not accepted."""
    source, target = reshape.inputs[0].shape, _const(reshape.inputs[1])
    if source is None or target is None or "allowzero" in reshape.attributes:
        return None
    groups, i = [], 0
    for size in (int(s) for s in target):
        if size == 0:
            return None
        if size == -1:
            group = [i]
        else:
            group, product = [], 1
            while i + len(group) < len(source) and product < size:
                dim = source[i + len(group)]
                if not isinstance(dim, int):
                    return None
                product *= dim
                group.append(i + len(group))
            if product != size or not group:
                return None
        groups.append(group)
        i = group[-1] + 1
    return groups if i == len(source) else None


def _renumber(graph: ir.Graph, op: ir.Node, q: list[int]) -> list[int]:
    """Make `op` compute on its input transposed by `q` what it computed before, transposed by
    `q` after; the permutation its input must now be given."""
    if op.op_type == "Slice":
        rank = _rank(op)
        axes = _const(op.inputs[3]) if len(op.inputs) > 3 and op.inputs[3] is not None else None
        axes = np.arange(len(_const(op.inputs[1]))) if axes is None else axes
        where = np.argsort(q)  # old axis -> its position after q
        moved = np.array([where[a % rank] for a in axes], np.int64)
        if len(op.inputs) < 4:
            op.resize_inputs(4)
        op.replace_input_with(3, add_initializer(graph, f"{op.name}_permuted_axes", moved))
        return q
    if op.op_type == "Reshape":
        groups, target = _merged_groups(op), _const(op.inputs[1])
        op.replace_input_with(
            1,
            add_initializer(
                graph, f"{op.name}_permuted_shape", np.array([target[i] for i in q], np.int64)
            ),
        )
        return [axis for i in q for axis in groups[i]]
    if op.op_type in WITH_CONSTANT:
        constant = _const(op.inputs[1])
        full = constant.reshape((1,) * (len(q) - constant.ndim) + constant.shape)
        op.replace_input_with(
            1, add_initializer(graph, f"{op.name}_permuted_operand", full.transpose(q))
        )
    return q
