"""Two scalings by constants in a row become one Mul: Mul(Div(x, c1), c2) -> Mul(x, c2 / c1).

Paddle2ONNX writes hard-swish as x * clip(x + 3, 0, 6) / 6 and PP-LCNetV3 follows each one with
a learnable scale, so the PP-OCRv4 detector and recogniser divide by 6 and at once multiply by a
constant, 24 and 28 times: a pass over the tensor each that FP32 and INT8 both save.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FLOATS, FusionPass, add_initializer, read_once, replace_nodes


def scaling(node: ir.Node) -> tuple[ir.Value, np.ndarray] | None:
    """(x, factor in float64) when `node` is x * c, c * x or x / c with c a float constant, else None."""
    if node.op_type not in ("Mul", "Div") or len(node.inputs) != 2 or None in node.inputs:
        return None
    constant = [i for i, v in enumerate(node.inputs) if v.const_value is not None]
    if node.op_type == "Div":
        constant = [i for i in constant if i == 1]
    if len(constant) != 1 or node.inputs[constant[0]].const_value.dtype not in FLOATS:
        return None
    factor = node.inputs[constant[0]].const_value.numpy().astype(np.float64)
    if node.op_type == "Div":
        if np.any(factor == 0):
            return None
        factor = 1 / factor
    return node.inputs[1 - constant[0]], factor


class FoldScalingPass(FusionPass):
    """Folds a scaling by a constant into the scaling by a constant that reads it, when it is the
    first one's only reader: one Mul by the product, under the second one's name."""

    def match(self, node: ir.Node) -> tuple[ir.Node, ir.Value, np.ndarray] | None:
        """(first scaling, its input, the product of both factors) if `node` can take it."""
        second = scaling(node)
        if second is None:
            return None
        scaled, factor = second
        first = scaled.producer()
        if first is None or not read_once(scaled):
            return None
        inner = scaling(first)
        if inner is None:
            return None
        return first, inner[0], inner[1] * factor

    def rewrite(self, graph: ir.Graph, node: ir.Node, found) -> None:
        first, source, product = found
        dtype = next(v.const_value.dtype for v in node.inputs if v.const_value is not None)
        combined = add_initializer(
            graph, f"{node.name}_folded_scale", product.astype(dtype.numpy())
        )
        name = node.name
        mul = ir.Node("", "Mul", [source, combined])
        replace_nodes(graph, [first, node], mul)
        mul.name = name

    def ensures(self, model: ir.Model) -> None:
        for node in model.graph:
            if self.match(node) is not None:
                raise ir.passes.PostconditionError(f"{node.name}: a scaling chain left unfolded")
