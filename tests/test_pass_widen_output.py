"""`WidenOutputPass` (quantize/passes/widen_output.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import HOST_WEIGHTS, run
from onnx import TensorProto, helper, numpy_helper

from quantize import passes
from quantize.plan import QuantPlan


def _conv_read_by_fp32() -> ir.Model:
    """x(N,1,8,8) -> Conv (4 channels, channel 0 30x stronger) -> Abs -> y: the Conv's output
    is read by an op with no INT8 rule."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32)
    w[0] *= 30
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Abs", ["c"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [numpy_helper.from_array(w, "w")],
    )
    return passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )


def test_a_widened_conv_output_is_16x_finer_near_zero_and_unchanged_beyond():
    from quantize.coverage import kernel_counts, optimized_graph
    from quantize.passes.widen_output import FINE_RATIO

    x = np.random.default_rng(1).uniform(0, 1, (16, 1, 8, 8)).astype(np.float32)
    exact = np.abs(run(_conv_read_by_fp32(), x))
    ranges = {"x": (0.0, 1.0), "c": (-float(exact.max()), float(exact.max()))}
    coarse = ir.serde.serialize_model(
        passes.lower_to_qdq(_conv_read_by_fp32(), QuantPlan({"conv"}, dict(ranges), HOST_WEIGHTS))
    )
    widened = ir.serde.serialize_model(
        passes.lower_to_qdq(
            _conv_read_by_fp32(), QuantPlan({"conv"}, dict(ranges), HOST_WEIGHTS, wide={"conv"})
        )
    )
    assert kernel_counts(optimized_graph(widened))["int8"]["QLinearConv"] == 2
    got_coarse, got_wide = run(coarse, x), run(widened, x)
    fine_limit = exact.max() / FINE_RATIO
    small, large = exact < 0.8 * fine_limit, exact > 1.2 * fine_limit
    assert (
        small.mean() > 0.5 and large.any()
    )  # channel 0 sets the range; the other three stay near zero
    # 16x finer output rounding; the input's rounding, common to both, keeps the ratio near 5
    assert np.std((got_wide - exact)[small]) < np.std((got_coarse - exact)[small]) / 4
    coarse_step = 2 * exact.max() / 255
    assert np.abs(got_wide - got_coarse)[large].max() <= coarse_step / FINE_RATIO + 1e-5
