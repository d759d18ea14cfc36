"""A Div by a constant goes to INT8 as a Mul by its reciprocal (ONNX Runtime's QLinearMul); a
Div by an activation, or by a constant with a zero, stays FP32 and says why."""

import numpy as np
import onnx
import onnx_ir as ir
from graphs import hard_swish_net, images, plan_for, run, run_pass

from quantize import Recipe, quantize
from quantize.passes import DivToMulPass
from quantize.policy import select_nodes


def _typed(model: onnx.ModelProto) -> ir.Model:
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))


def test_a_div_by_a_constant_is_int8_and_one_by_an_activation_or_a_zero_is_not():
    selection = select_nodes(_typed(hard_swish_net()))
    assert "div" in selection.int8
    assert selection.fp32["div_by_activation"].startswith("it divides by an activation or by zero")
    per_channel = np.array([6, 0, 6, 6, 6, 6, 6, 6]).reshape(8, 1, 1)
    with_zero = select_nodes(_typed(hard_swish_net(divisor=per_channel)))
    assert "div" not in with_zero.int8 and "div" in with_zero.fp32


def test_the_pass_puts_a_mul_by_the_reciprocal_under_the_divs_name():
    model = hard_swish_net()  # not cleaned up: its hard-swish is written out
    planned = ir.serde.deserialize_model(model)
    rewritten = run_pass(DivToMulPass(plan_for(planned, {"div"})), model)
    (mul,) = [n for n in rewritten.graph if n.name == "div"]
    assert mul.op_type == "Mul" and mul.inputs[1].const_value.numpy() == np.float32(1 / 6)
    assert [n.name for n in rewritten.graph if n.op_type == "Div"] == ["div_by_activation"]
    x = images(4)
    np.testing.assert_allclose(run(rewritten, x), run(model, x), rtol=1e-5, atol=1e-6)


def test_a_div_by_a_constant_runs_without_a_float_island(tmp_path):
    onnx.save(hard_swish_net(divisor=5.0), str(tmp_path / "hs.onnx"))  # no hard-swish: / 5
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "hs.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    decisions = {d.name: d.precision for d in result.decisions}
    assert decisions["div"] == "int8" and decisions["div_by_activation"] == "fp32"
    assert result.kernels["int8"]["QLinearMul"] == 2  # the Mul by the clipped input and the / 5
    assert "Div" not in result.kernels["float"] or result.kernels["float"]["Div"] == 1
    assert min(result.output_sqnr_db.values()) > 20
