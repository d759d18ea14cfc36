"""Move a Reshape that only splits axes in front of the Transpose before it.

Transpose -> Reshape(split) is the same as Reshape(split the input's axes) -> Transpose, and
in that order the Transpose can meet the next one and merge with it (`MergeTransposesPass`).
The upsampling folded into a Conv (`FoldUpsampleIntoConvPass`) splits the phases out of the
channels that the Conv3D folding has just transposed to channels-first: three passes over the
largest tensor of the 3DGAN generator become one.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, replace_nodes


class SplitBeforeTransposePass(FusionPass):
    """Rewrites Transpose -> Reshape(split axes) as Reshape -> Transpose, so that the
    Transpose can merge with the next one. Only Reshapes that split axes without reordering."""

    def match(self, reshape: ir.Node) -> tuple[ir.Node, list[list[int]]] | None:
        """(the Transpose, the sizes each of its output axes is split into)."""
        if (
            reshape.op_type != "Reshape"
            or reshape.inputs[1] is None
            or reshape.inputs[1].const_value is None
        ):
            return None
        transpose = reshape.inputs[0].producer()
        if (
            transpose is None
            or transpose.op_type != "Transpose"
            or "perm" not in transpose.attributes
            or len(transpose.outputs[0].uses()) != 1
        ):
            return None
        source = transpose.inputs[0]
        if source.shape is None or (
            "allowzero" in reshape.attributes and reshape.attributes["allowzero"].value
        ):
            return None
        perm = list(transpose.attributes["perm"].value)
        dims = [source.shape[p] for p in perm]
        return (
            (transpose, groups)
            if (
                groups := _split_groups(
                    dims, [int(d) for d in reshape.inputs[1].const_value.numpy()]
                )
            )
            else None
        )

    def rewrite(self, graph: ir.Graph, reshape: ir.Node, found) -> None:
        transpose, groups = found
        perm = list(transpose.attributes["perm"].value)
        inverse = list(np.argsort(perm))
        first = np.cumsum(
            [0] + [len(groups[inverse[axis]]) for axis in range(len(perm))]
        )  # input axis -> its first split axis
        shape = [size for axis in range(len(perm)) for size in groups[inverse[axis]]]
        split = ir.Node(
            "",
            "Reshape",
            [
                transpose.inputs[0],
                add_initializer(graph, f"{reshape.name}_split_shape", np.array(shape, np.int64)),
            ],
            name=f"{reshape.name}_before_transpose",
        )
        moved = ir.Node(
            "",
            "Transpose",
            [split.outputs[0]],
            name=f"{transpose.name}_after_split",
            attributes=[
                ir.AttrInt64s(
                    "perm",
                    [
                        int(first[perm[i]]) + g
                        for i in range(len(perm))
                        for g in range(len(groups[i]))
                    ],
                )
            ],
        )
        split.outputs[0].name = split.name
        graph.insert_before(transpose, split)
        replace_nodes(graph, [transpose, reshape], moved)


def _split_groups(dims: list, target: list[int]) -> list[list[int]] | None:
    """How each of `dims` is split into consecutive `target` sizes, or None if the Reshape
    does more than split. A symbolic dim (the batch) must stay whole, as -1, or as 0 at its
    own position (0 copies the input's dim at the same index)."""
    groups, j = [], 0
    for i, dim in enumerate(dims):
        if not isinstance(dim, int):
            if j >= len(target) or not (target[j] == -1 or (target[j] == 0 and j == i)):
                return None
            groups.append([-1])
            j += 1
            continue
        group, product = [], 1
        while (product < dim or not group) and j < len(target) and target[j] > 0:
            group.append(target[j])
            product *= target[j]
            j += 1
        if product != dim or not group:
            return None
        groups.append(group)
    return groups if j == len(target) and sum(s == -1 for g in groups for s in g) <= 1 else None
