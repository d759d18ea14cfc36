"""A planned nearest upsampling by whole factors becomes a copy that ONNX Runtime runs in NHWC.

ORT runs the integer Convs around such a Resize (a feature pyramid's) in NHWC. Its uint8 nearest
Resize on NHWC data goes through a generic per-element loop; run in NCHW instead, it costs two
layout Transposes of the map, and ORT's uint8 Transpose from NCHW to NHWC is slow too
(docs/zoo.md). Nearest upsampling with asymmetric coordinates and floor rounding by whole
factors (fh, fw) repeats each pixel fh x fw times: on NHWC data an Unsqueeze to
(N, H, 1, W, 1, C), an Expand to (N, H, fh, W, fw, C) and a Reshape to (N, fh H, fw W, C), which
copy runs of C bytes. Written between a Transpose to NHWC and one back (`copied_in_nhwc`), they
let ORT's transpose optimizer cancel both against the Convs' layout Transposes.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import TO_NCHW, NodeChain, copied_in_nhwc, nhwc_shape, replace_nodes
from quantize.plan import QuantPlan

NEAREST = {
    "mode": "nearest",
    "coordinate_transformation_mode": "asymmetric",
    "nearest_mode": "floor",
}


class UpsampleAsCopyPass(ir.passes.InPlacePass):
    """Rewrites each planned Resize that upsamples the spatial axes of an NCHW tensor by whole
    factors, nearest and quantized at one scale on both sides (InsertQDQPass's DQ -> Resize -> Q),
    into DQ -> Transpose -> Unsqueeze -> Expand -> Reshape -> Transpose -> Q, with a Q/DQ pair
    at that scale after each step."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        planned = (n for n in model.graph if n.name in self.plan.nodes)
        chosen = {node: factors for node in planned if (factors := _factors(node))}
        for node, factors in chosen.items():
            _rewrite(model.graph, node, factors)
        return ir.passes.PassResult(model, modified=bool(chosen))

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if node.name in self.plan.nodes and _factors(node) is not None:
                raise ir.passes.PostconditionError(f"{node.name}: a nearest upsampling is left")


def _factors(node: ir.Node) -> tuple[int, int] | None:
    """(fh, fw) where `node` is a Resize this pass rewrites."""
    if node.op_type != "Resize":
        return None
    factors = _nearest_factors(node)
    return factors if factors and _quantized_at_one_scale(node) else None


def _nearest_factors(resize: ir.Node) -> tuple[int, int] | None:
    """(fh, fw) where `resize` is a nearest upsampling of H and W by whole factors given by
    constant scales."""
    if len(resize.inputs) != 3 or resize.inputs[2] is None:
        return None
    roi = resize.inputs[1]
    if roi is not None and (roi.const_value is None or roi.const_value.size != 0):
        return None
    if any(resize.attributes.get_string(key, "") != value for key, value in NEAREST.items()):
        return None
    scales = resize.inputs[2].const_value
    if scales is None or scales.shape != (4,):
        return None
    batch, channels, height, width = scales.numpy().tolist()
    whole = all(f >= 1 and f == int(f) for f in (height, width))
    if (batch, channels) != (1, 1) or not whole or (height, width) == (1, 1):
        return None
    return int(height), int(width)


def _quantized_at_one_scale(resize: ir.Node) -> bool:
    """Does `resize` read a DequantizeLinear and is it read by one QuantizeLinear, both with the
    same constant scale and zero point?"""
    source = resize.inputs[0].producer()
    readers = [user for user, _ in resize.outputs[0].uses()]
    if source is None or source.op_type != "DequantizeLinear" or len(readers) != 1:
        return False
    target = readers[0]
    if target.op_type != "QuantizeLinear" or len(source.inputs) != 3 or len(target.inputs) != 3:
        return False
    return all(_equal(a, b) for a, b in zip(source.inputs[1:], target.inputs[1:]))


def _equal(a: ir.Value | None, b: ir.Value | None) -> bool:
    if a is None or b is None or a.const_value is None or b.const_value is None:
        return False
    return np.array_equal(a.const_value.numpy(), b.const_value.numpy())


def _rewrite(graph: ir.Graph, node: ir.Node, factors: tuple[int, int]) -> None:
    height, width = factors
    dequantized = node.inputs[0]
    chain = NodeChain(graph, node.name)
    upsampled_shape = nhwc_shape(chain, dequantized.producer().inputs[0], [1, 1, height, width])
    moved = copied_in_nhwc(
        chain,
        dequantized,
        [
            ("Unsqueeze", [chain.const("spread_axes", np.array([2, 4], np.int64))]),
            ("Expand", [chain.const("repeats", np.array([1, 1, height, 1, width, 1], np.int64))]),
            ("Reshape", [upsampled_shape]),
        ],
    )
    graph.insert_before(node, chain.nodes)
    perm = [ir.AttrInt64s("perm", TO_NCHW)]
    replace_nodes(graph, [node], ir.Node("", "Transpose", [moved], attributes=perm, name=node.name))
