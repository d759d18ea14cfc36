"""Hard-swish written out, x * clip(x + 3, 0, 6) / 6, becomes one HardSwish node.

Paddle2ONNX writes each hard-swish of PP-LCNet as Add, Clip, Mul and Div (the PP-OCR detector,
recogniser and direction classifier have 24, 28 and 18 of them): four passes over the tensor
where ONNX Runtime's HardSwish kernel makes one. HardSwish is an opset-14 op; the model's
default-domain opset is raised to 14 where it is 13 (no op changes meaning between the two:
the new attributes of Reshape, BatchNormalization and the RNNs default to opset 13's behaviour).
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.fold_scaling import scaling
from quantize.passes.rewrite import FusionPass, replace_nodes

HARD_SWISH_OPSET = 14


class FuseHardSwishPass(FusionPass):
    """Fuses Add(x, 3) -> Clip(0, 6) -> Mul(x, .) -> Div(6) (or Mul by 1/6) into HardSwish(x),
    when each intermediate value has no other reader; the HardSwish takes the last node's name."""

    def requires(self, model: ir.Model) -> None:
        if model.opset_imports.get("", 0) < 13:
            raise ir.passes.PreconditionError("fusing hard-swish needs opset 13 or later")

    def match(self, node: ir.Node) -> tuple[list[ir.Node], ir.Value] | None:
        """(the four nodes, x) if `node` ends a hard-swish of x."""
        scaled = scaling(node)
        if scaled is None or not np.allclose(scaled[1], 1 / 6, rtol=1e-6, atol=0):
            return None
        product = _only_reader_of(scaled[0], node)
        if product is None or product.op_type != "Mul" or len(product.inputs) != 2:
            return None
        for x, clipped in (product.inputs, reversed(product.inputs)):
            clip = _only_reader_of(clipped, product)
            if clip is None or clip.op_type != "Clip" or not _bounds_are(clip, 0.0, 6.0):
                continue
            add = _only_reader_of(clip.inputs[0], clip)
            if add is not None and _adds_three(add, x):
                return [add, clip, product, node], x
        return None

    def rewrite(self, graph: ir.Graph, node: ir.Node, found) -> None:
        nodes, x = found
        name = node.name
        fused = ir.Node("", "HardSwish", [x])
        replace_nodes(graph, nodes, fused)
        fused.name = name

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        result = super().call(model)
        if result.modified:
            model.opset_imports[""] = max(model.opset_imports[""], HARD_SWISH_OPSET)
        return result

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if self.match(node) is not None:
                raise ir.passes.PostconditionError(f"{node.name}: a hard-swish left unfused")


def _only_reader_of(value: ir.Value | None, reader: ir.Node) -> ir.Node | None:
    """The producer of `value` when `reader` is its one reader and it is no graph output."""
    if value is None or value.is_graph_output():
        return None
    uses = list(value.uses())
    return value.producer() if len(uses) == 1 and uses[0][0] is reader else None


def _scalar(value: ir.Value | None) -> float | None:
    if value is None or value.const_value is None or value.const_value.numpy().size != 1:
        return None
    return float(value.const_value.numpy().ravel()[0])


def _bounds_are(clip: ir.Node, low: float, high: float) -> bool:
    return len(clip.inputs) == 3 and (_scalar(clip.inputs[1]), _scalar(clip.inputs[2])) == (
        low,
        high,
    )


def _adds_three(add: ir.Node, x: ir.Value) -> bool:
    if add.op_type != "Add" or len(add.inputs) != 2:
        return False
    a, b = add.inputs
    return (a is x and _scalar(b) == 3.0) or (b is x and _scalar(a) == 3.0)
