"""`ShiftIntoZeroPointPass`: an INT8 Add of one constant before a padded Conv leaves the graph,
the Conv reading its input at a shifted zero point, and the result stays FP32's to a rounding."""

import numpy as np
import onnx_ir as ir
from graphs import HOST_WEIGHTS, images, lcnet_block, ops, plan_for, run
from onnx import TensorProto, helper, numpy_helper
from onnx_ir.passes import common

from quantize import passes
from quantize.plan import QuantPlan

STEP = 0.01  # the uint8 step of the shifted tensor and of the output: ranges of 2.55
SHIFT = 0.305  # 30.5 steps: its rounding misses it by half a step


def _shift_then_mean_filter(shift: float = SHIFT) -> ir.Model:
    """x(N,1,32,32) -> + shift -> 3x3 mean filter with zero padding 1 -> y."""
    nodes = [
        helper.make_node("Add", ["x", "shift"], ["v"], name="shift"),
        helper.make_node("Conv", ["v", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="conv"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 32, 32])],
        [
            numpy_helper.from_array(np.float32(shift), "shift"),
            numpy_helper.from_array(np.full((1, 1, 3, 3), 1 / 9, np.float32), "w"),
            numpy_helper.from_array(np.zeros(1, np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return passes.cleanup(ir.serde.deserialize_model(model))


def _lowered(model: ir.Model, plan: QuantPlan, shift_into_zero_point: bool) -> ir.Model:
    chain = [passes.InsertQDQPass(plan), passes.HardSwishToQLinearPass(plan)]
    if shift_into_zero_point:
        chain.append(passes.ShiftIntoZeroPointPass(plan))
    chain += [common.RemoveUnusedNodesPass(), common.CheckerPass()]
    return ir.passes.PassManager(chain)(model.clone()).model


def test_the_padding_is_still_zero_of_the_shifted_input_and_the_rounding_of_the_shift_is_undone():
    model = _shift_then_mean_filter()
    ranges = {"x": (0.0, 1.0), "v": (0.0, 255 * STEP), "y": (0.0, 255 * STEP)}
    plan = QuantPlan({"shift", "conv"}, ranges, HOST_WEIGHTS)
    x = np.random.default_rng(0).uniform(0, 1, (16, 1, 32, 32)).astype(np.float32)
    reference = run(model, x)
    lowered = _lowered(model, plan, shift_into_zero_point=True)
    assert "Add" not in ops(lowered)
    error = run(lowered, x) - reference
    # a padded tap read as SHIFT instead of 0 would be off by SHIFT / 9 at every border
    assert np.abs(error).max() < 1.6 * STEP
    # the shift rounded to 30 or 31 steps, not put back in the bias, would be off by STEP / 2
    assert abs(error.mean()) < STEP / 10


def test_in_a_hard_swish_block_the_add_leaves_and_the_rounding_of_its_shift_is_undone():
    model = passes.cleanup(ir.serde.deserialize_model(lcnet_block()))
    plan = plan_for(model, {n.name for n in model.graph})
    x = images(16)
    reference = run(model, x)

    def sqnr(lowered):
        return 10 * np.log10((reference**2).sum() / ((run(lowered, x) - reference) ** 2).sum())

    without, with_ = (_lowered(model, plan, shift) for shift in (False, True))
    assert ops(with_).count("Add") == ops(without).count("Add") - 1
    assert sqnr(with_) > sqnr(without) + 1


def test_a_shift_beyond_the_range_of_its_output_stays_an_add():
    model = _shift_then_mean_filter(shift=3.0)  # 300 steps: no uint8 zero point moves that far
    ranges = {"x": (0.0, 1.0), "v": (0.0, 255 * STEP), "y": (0.0, 255 * STEP)}
    lowered = _lowered(model, QuantPlan({"shift", "conv"}, ranges, HOST_WEIGHTS), True)
    assert "Add" in ops(lowered)
