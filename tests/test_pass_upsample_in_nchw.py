"""`UpsampleInNCHWPass`: a quantized nearest upsampling by 4 between INT8 Convs becomes two
Resizes by 2 that ONNX Runtime runs on NCHW data, and the model computes the same bits."""

import numpy as np
import onnx
import onnx_ir as ir
from graphs import image_model, images, plan_for, run
from onnx import helper, numpy_helper
from onnx.numpy_helper import to_array
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


def _lowered(model: ir.Model, upsample_in_nchw: bool, fp32: tuple[str, ...] = ()) -> ir.Model:
    plan = plan_for(model, {n.name for n in model.graph} - set(fp32), size=24)
    chain = [passes.InsertQDQPass(plan)]
    if upsample_in_nchw:
        chain.append(passes.UpsampleInNCHWPass(plan))
    chain += [common.RemoveUnusedNodesPass(), common.CheckerPass()]
    return ir.passes.PassManager(chain)(model.clone()).model


def _resize_scales_as_run(model: ir.Model) -> list[list[float]]:
    """The scales of each Resize in the graph ONNX Runtime runs: [1, 1, k, k] on NCHW data,
    [1, k, k, 1] where its layout optimizer moved the Resize into NHWC."""
    graph = optimized_graph(ir.serde.serialize_model(model))
    constants = {t.name: to_array(t) for t in graph.initializer}
    return [constants[n.input[2]].tolist() for n in graph.node if n.op_type == "Resize"]


def test_an_upsampling_by_4_runs_as_two_nchw_resizes_by_2_to_the_same_bits():
    model = _pyramid_step()
    x = images(4, size=24)
    before, after = _lowered(model, False), _lowered(model, True)
    assert _resize_scales_as_run(before) == [[1, 4, 4, 1]]  # what the pass is for: NHWC
    assert _resize_scales_as_run(after) == [[1, 1, 2, 2], [1, 1, 2, 2]]
    assert np.array_equal(run(after, x), run(before, x))
    assert np.abs(run(after, x) - run(model, x)).max() < 0.1 * np.abs(run(model, x)).max()


def test_an_upsampling_it_cannot_split_into_nearest_doublings_is_left_alone():
    for model, fp32 in (
        (_pyramid_step(factor=3), ()),
        (_pyramid_step(coordinates="half_pixel"), ()),
        (_pyramid_step(), ("up",)),  # planned FP32
    ):
        after = _lowered(model, True, fp32)
        resizes = [n for n in after.graph if n.op_type == "Resize"]
        assert [n.name for n in resizes] == ["up"]
        assert "Reshape" not in [n.op_type for n in after.graph]
        onnx.checker.check_model(ir.serde.serialize_model(after))
