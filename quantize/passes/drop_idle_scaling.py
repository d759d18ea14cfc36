"""Undo smoothing where no INT8 node reads it: a fallback or kernel timing sent the GEMMs after
a scaling Mul back to FP32 once the graph was smoothed (passes/smooth_activations.py). Smoothing
serves a uint8 scale; without one the Mul is pure cost, so it folds back into their weights."""

import onnx_ir as ir

from quantize.passes.smooth_activations import SCALING_MUL, scale_weight_rows
from quantize.plan import QuantPlan


def idle_scaling_muls(model: ir.Model, int8: set[str]) -> list[ir.Node]:
    """The scaling Muls no node of `int8` reads: every GEMM after them stays FP32 (a fallback
    or kernel timing sent it back after smoothing)."""
    return [
        mul
        for mul in model.graph
        if mul.meta.get(SCALING_MUL)
        and not any(user.name in int8 for user, _ in mul.outputs[0].uses())
    ]


class DropIdleScalingPass(ir.passes.InPlacePass):
    """Folds each idle scaling Mul (`idle_scaling_muls` of the plan's INT8 nodes) back into the
    weights of the FP32 GEMMs that read it, and removes it."""

    def __init__(self, plan: QuantPlan):
        super().__init__()
        self.plan = plan

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        idle = idle_scaling_muls(model, self.plan.nodes)
        for mul in idle:
            inverse = mul.inputs[1].const_value.numpy()
            for gemm, _ in list(mul.outputs[0].uses()):
                scale_weight_rows(model.graph, gemm, inverse, "unsmoothed_weight")
                gemm.replace_input_with(0, mul.inputs[0])
            model.graph.remove(mul, safe=True)
        return ir.passes.PassResult(model, modified=bool(idle))
