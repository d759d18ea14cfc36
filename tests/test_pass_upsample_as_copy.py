"""`UpsampleAsCopyPass`: a quantized nearest upsampling by whole factors between INT8 Convs
becomes a copy that ONNX Runtime runs on NHWC data, with no Resize and no Transpose of its own,
and the model computes the same bits."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from graphs import image_model, images, plan_for, run
from onnx import helper, numpy_helper
from onnx_ir.passes import common

from quantize import passes
from quantize.coverage import optimized_graph


def _pyramid_step(factor: int = 4, coordinates: str = "asymmetric") -> ir.Model:
    """x(N,3,24,24) -> Conv stride `factor` -> upsampled by `factor` -> + Conv(x) -> Conv -> y,
    the upsampling nearest (floor rounding) as a PyTorch or Paddle export writes it."""
    rng = np.random.default_rng(0)

    def weight(name, shape):
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)

    nodes = [
        helper.make_node(
            "Conv", ["x", "w_coarse"], ["coarse"], strides=[factor, factor], name="coarse"
        ),
        helper.make_node(
            "Resize",
            ["coarse", "", "scales"],
            ["up"],
            mode="nearest",
            coordinate_transformation_mode=coordinates,
            nearest_mode="floor",
            name="up",
        ),
        helper.make_node("Conv", ["x", "w_fine"], ["fine"], name="fine"),
        helper.make_node("Add", ["up", "fine"], ["merged"], name="merge"),
        helper.make_node("Conv", ["merged", "w_out"], ["y"], name="out"),
    ]
    inits = [
        weight("w_coarse", (8, 3, factor, factor)),
        numpy_helper.from_array(np.array([1, 1, factor, factor], np.float32), "scales"),
        weight("w_fine", (8, 3, 1, 1)),
        weight("w_out", (8, 8, 1, 1)),
    ]
    model = image_model(nodes, inits, "pyramid", y_channels=8, size=24)
    return passes.cleanup(ir.serde.deserialize_model(model))


def _lowered(model: ir.Model, upsample_as_copy: bool, fp32: tuple[str, ...] = ()) -> ir.Model:
    plan = plan_for(model, {n.name for n in model.graph} - set(fp32), size=24)
    chain = [passes.InsertQDQPass(plan)]
    if upsample_as_copy:
        chain.append(passes.UpsampleAsCopyPass(plan))
    chain += [common.RemoveUnusedNodesPass(), common.CheckerPass()]
    return ir.passes.PassManager(chain)(model.clone()).model


def _ops_as_run(model: ir.Model) -> list[str]:
    """The op types of the graph ONNX Runtime runs, after its layout and Q/DQ fusions."""
    return [n.op_type for n in optimized_graph(ir.serde.serialize_model(model)).node]


@pytest.mark.parametrize("factor", [2, 3, 4])
def test_an_upsampling_runs_as_an_nhwc_copy_with_no_transpose_of_its_own_to_the_same_bits(factor):
    model = _pyramid_step(factor)
    x = images(4, size=24)
    before, after = _lowered(model, False), _lowered(model, True)
    ran_before, ran = _ops_as_run(before), _ops_as_run(after)
    assert "Resize" in ran_before
    assert "Resize" not in ran and "Expand" in ran
    # no Transpose but the graph input's and output's, and every copy on uint8
    for op in ("Transpose", "QuantizeLinear", "DequantizeLinear"):
        assert ran.count(op) == ran_before.count(op), op
    assert ran.count("Transpose") == 2
    assert np.array_equal(run(after, x), run(before, x))
    assert np.abs(run(after, x) - run(model, x)).max() < 0.1 * np.abs(run(model, x)).max()


def test_an_upsampling_it_cannot_write_as_a_copy_is_left_alone():
    for model, fp32 in (
        (_pyramid_step(coordinates="half_pixel"), ()),
        (_pyramid_step(), ("up",)),  # planned FP32
    ):
        after = _lowered(model, True, fp32)
        resizes = [n for n in after.graph if n.op_type == "Resize"]
        assert [n.name for n in resizes] == ["up"]
        assert "Expand" not in [n.op_type for n in after.graph]
        onnx.checker.check_model(ir.serde.serialize_model(after))
