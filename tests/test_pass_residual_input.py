"""`ResidualInputPass` (quantize/passes/residual_input.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import HOST_WEIGHTS, run
from onnx import TensorProto, helper, numpy_helper

from quantize import passes
from quantize.plan import QuantPlan


def _identity_conv_read_by_fp32() -> ir.Model:
    """x(N,1,8,8) -> 1x1 Conv of weight 1 -> Abs -> y: each output is one input, unmixed."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Abs", ["c"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")],
    )
    return passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )


def test_a_residual_input_conv_removes_most_of_the_input_rounding():
    """x spans 0-30 but is mostly below 1: its uint8 step (0.12) is what the Conv's output
    error is made of once the output is widened (step 0.015); the residual Conv takes the
    input's rounding 254x finer."""
    from quantize.coverage import kernel_counts, optimized_graph

    x = np.random.default_rng(5).uniform(0, 1, (16, 1, 8, 8)).astype(np.float32)
    x[:, :, 0, 0] = 30.0
    ranges = {"x": (0.0, 30.0), "c": (-30.0, 30.0)}
    widened = ir.serde.serialize_model(
        passes.lower_to_qdq(
            _identity_conv_read_by_fp32(),
            QuantPlan({"conv"}, dict(ranges), HOST_WEIGHTS, wide={"conv"}),
        )
    )
    both = ir.serde.serialize_model(
        passes.lower_to_qdq(
            _identity_conv_read_by_fp32(),
            QuantPlan({"conv"}, dict(ranges), HOST_WEIGHTS, wide={"conv"}, residual={"conv"}),
        )
    )
    assert kernel_counts(optimized_graph(both))["int8"]["QLinearConv"] == 3
    small = x < 1  # the 30s are beyond the fine output range, and saturate the coarse one
    error_widened, error_both = (np.std((run(m, x) - x)[small]) for m in (widened, both))
    assert error_both < error_widened / 20
