"""A planned nearest upsampling by 2, 4, 8... becomes Resizes by 2 that ONNX Runtime runs in NCHW.

ORT runs the integer Convs around such a Resize (a feature pyramid's) in NHWC, and its transpose
optimizer moves their layout Transposes through the Resize, whose uint8 nearest kernel is far
slower on NHWC data than its NCHW kernel by 2 (docs/zoo.md). A Reshape to the same shape after
the last Resize stops the Transposes there, so the Resize keeps NCHW and two uint8 Transposes
are paid instead. By 4 or 8 the NCHW kernel is slow too, so the upsampling becomes a chain of
Resizes by 2: nearest with asymmetric coordinates and floor rounding takes input floor(i / k),
and floor(floor(i / 2) / 2) = floor(i / 4). Nearest copies values, so the Q/DQ pairs between
the links are exact.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import NodeChain, replace_nodes
from quantize.plan import QuantPlan

NEAREST = {
    "mode": "nearest",
    "coordinate_transformation_mode": "asymmetric",
    "nearest_mode": "floor",
}


class UpsampleInNCHWPass(ir.passes.InPlacePass):
    """Rewrites each planned Resize that upsamples the two spatial axes of an NCHW tensor by the
    same power of 2, nearest and quantized at one scale on both sides (InsertQDQPass's
    DQ -> Resize -> Q), into DQ -> Resize(2) -> Q -> DQ ... Resize(2) -> Q -> DQ -> Reshape."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        planned = (n for n in model.graph if n.name in self.plan.nodes)
        chosen = {node: doubles for node in planned if (doubles := _doubles(node))}
        for node, doubles in chosen.items():
            _rewrite(model.graph, node, doubles)
        return ir.passes.PassResult(model, modified=bool(chosen))

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if node.name in self.plan.nodes and _doubles(node) is not None:
                raise ir.passes.PostconditionError(f"{node.name}: an upsampling by 2^n is left")


def _doubles(node: ir.Node) -> int | None:
    """How many times `node` doubles H and W, if it is a Resize this pass rewrites."""
    if node.op_type != "Resize":
        return None
    steps = _nearest_doublings(node)
    return steps if steps and _quantized_at_one_scale(node) else None


def _nearest_doublings(resize: ir.Node) -> int:
    """n where `resize` is a nearest upsampling of H and W by 2^n given by constant scales."""
    if len(resize.inputs) != 3 or resize.inputs[2] is None:
        return 0
    roi = resize.inputs[1]
    if roi is not None and (roi.const_value is None or roi.const_value.size != 0):
        return 0
    if any(resize.attributes.get_string(key, "") != value for key, value in NEAREST.items()):
        return 0
    scales = resize.inputs[2].const_value
    if scales is None or scales.shape != (4,):
        return 0
    batch, channels, height, width = scales.numpy().tolist()
    steps = int(np.log2(height)) if height >= 2 else 0
    if (batch, channels) != (1, 1) or height != width or 2**steps != height:
        return 0
    return steps


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


def _rewrite(graph: ir.Graph, node: ir.Node, doubles: int) -> None:
    _, scale, zero_point = node.inputs[0].producer().inputs
    chain = NodeChain(graph, node.name)
    by_two = chain.const("scales_by_two", np.array([1, 1, 2, 2], np.float32))
    value = node.inputs[0]
    for step in range(doubles):
        resized = chain.node("Resize", [value, None, by_two], f"by_two_{step}", **NEAREST)
        quantized = chain.node("QuantizeLinear", [resized, scale, zero_point], f"q_{step}")
        value = chain.node("DequantizeLinear", [quantized, scale, zero_point], f"dq_{step}")
        for made in (resized, value):
            made.type = node.outputs[0].type
    graph.insert_before(node, chain.nodes)
    same_shape = chain.const("same_shape", np.zeros(4, np.int64))
    replace_nodes(graph, [node], ir.Node("", "Reshape", [value, same_shape], name=node.name))
