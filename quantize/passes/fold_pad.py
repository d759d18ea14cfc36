"""Fold a zero Pad into the Conv it feeds (also through the exporter's layout Transpose).

ONNX Runtime runs a Q/DQ-wrapped Pad in float; a Conv's own `pads` cost nothing.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, int_list, read_once, uses_auto_pad


def _zero_pad(node: ir.Node) -> np.ndarray | None:
    """The pads (begin..., end...) of a constant-zero Pad with constant pads, else None."""
    if (
        node is None
        or node.op_type != "Pad"
        or len(node.inputs) < 2
        or node.inputs[1] is None
        or node.inputs[1].const_value is None
    ):
        return None
    if "mode" in node.attributes and node.attributes["mode"].value != "constant":
        return None
    value = node.inputs[2] if len(node.inputs) > 2 else None
    if value is not None and (value.const_value is None or np.any(value.const_value.numpy() != 0)):
        return None
    if len(node.inputs) > 3 and node.inputs[3] is not None:  # explicit axes: not handled
        return None
    return node.inputs[1].const_value.numpy().astype(np.int64)


class FoldPadIntoConvPass(FusionPass):
    """Moves a constant-zero Pad of the spatial axes into the pads of the Conv that reads it.

    Also through the exporter's NHWC->NCHW Transpose between them; a Pad with other readers,
    a non-zero value or padding of batch/channel axes stays."""

    def match(self, conv: ir.Node) -> tuple[ir.Node, ir.Node | None, list[int]] | None:
        if conv.op_type != "Conv" or uses_auto_pad(conv):
            return None
        source = conv.inputs[0].producer()
        transpose, perm = None, None
        if (
            source is not None
            and source.op_type == "Transpose"
            and len(source.outputs[0].uses()) == 1
        ):
            transpose, perm = source, list(source.attributes["perm"].value)
            source = source.inputs[0].producer()
        pads = _zero_pad(source)
        if pads is None or not read_once(source.outputs[0]):
            return None
        rank = len(pads) // 2
        perm = perm or list(range(rank))
        begin, end = pads[:rank][perm], pads[rank:][perm]  # in the Conv's axis order
        if begin[:2].any() or end[:2].any():
            return None  # pads on batch or channels
        return source, transpose, [*begin[2:].tolist(), *end[2:].tolist()]

    def rewrite(self, graph: ir.Graph, conv: ir.Node, found) -> None:
        pad, transpose, extra = found
        spatial = len(extra) // 2
        old = int_list(conv, "pads", [0] * (2 * spatial))
        conv.attributes["pads"] = ir.AttrInt64s("pads", [a + b for a, b in zip(old, extra)])
        consumer = transpose or conv
        consumer.replace_input_with(0, pad.inputs[0])
        if transpose is not None:
            transpose.outputs[0].shape = None  # smaller now; shape inference fills it in again
        graph.remove(pad, safe=True)
