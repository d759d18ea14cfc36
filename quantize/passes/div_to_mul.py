"""A planned Div by a constant becomes a Mul by its reciprocal, which ONNX Runtime runs as
QLinearMul.

ORT has no quantized Div: between INT8 neighbours one costs a DequantizeLinear, a float pass and
a QuantizeLinear. Hard-swish as Paddle2ONNX writes it ends in one, x * clip(x + 3, 0, 6) / 6,
24 times in the PP-OCRv4 detector.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import add_initializer, replace_nodes
from quantize.plan import QuantPlan


class DivToMulPass(ir.passes.InPlacePass):
    """Replaces each planned Div(x, c) by Mul(x, 1/c) under the Div's name, so that the plan
    (and InsertQDQPass after it) applies to the Mul.

    Precondition: c is a float constant without a zero (the policy selects no other Div)."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def requires(self, model: ir.Model) -> None:
        for div in self._planned_divs(model):
            divisor = div.inputs[1].const_value
            if divisor is None or np.any(divisor.numpy() == 0):
                raise ir.passes.PreconditionError(f"{div.name}: divisor is not a non-zero constant")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        divs = self._planned_divs(model)
        for div in divs:
            divisor = div.inputs[1].const_value.numpy()
            reciprocal = add_initializer(
                model.graph, f"{div.name}_reciprocal", (1 / divisor).astype(divisor.dtype)
            )
            mul = ir.Node("", "Mul", [div.inputs[0], reciprocal])
            name = div.name
            replace_nodes(model.graph, [div], mul)
            mul.name = name
        return ir.passes.PassResult(model, modified=bool(divs))

    def _planned_divs(self, model: ir.Model) -> list[ir.Node]:
        return [n for n in model.graph if n.op_type == "Div" and n.name in self.plan.nodes]
