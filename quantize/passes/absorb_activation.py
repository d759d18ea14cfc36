"""Remove the Relus and Clips from 0 that the plan folds into the uint8 quantization of their
input."""

import onnx_ir as ir

from quantize.plan import QuantPlan


class AbsorbActivationPass(ir.passes.InPlacePass):
    """Deletes each activation the plan absorbed, its readers reading its input instead.

    Precondition: the input's planned range starts at 0, so the uint8 zero point clamps as the
    activation did (and a Clip's upper bound: the range ends at its output's, within it)."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        removed = [node for node in model.graph if node.name in self.plan.absorbed]
        for node in removed:
            source, result = node.inputs[0], node.outputs[0]
            if self.plan.ranges[source.name][0] != 0.0:
                raise ir.passes.PreconditionError(
                    f"{node.name}: absorbed activation needs a range starting at 0"
                )
            ir.convenience.replace_all_uses_with(result, source)
            model.graph.remove(node, safe=True)
        return ir.passes.PassResult(model, modified=bool(removed))
