"""`ZeroPointIntoBiasPass`: for OpenVINO, a Conv (a Gemm, a MatMul with a bias Add) reads its
uint8 input from zero, padded with the zero point, its bias taking the rest; the model computes
what it did."""

import numpy as np
import onnx_ir as ir
import pytest
from graphs import image_model, images, images_to, mixed_ops_net, plan_for, run
from onnx import helper, numpy_helper
from onnx_ir.passes import common

from quantize import passes
from quantize.passes.rewrite import raised_bias


def _lowered(model: ir.Model, move: bool, nodes: set[str] | None = None) -> ir.Model:
    plan = plan_for(model, nodes or {n.name for n in model.graph})
    chain = [passes.InsertQDQPass(plan)]
    if move:
        chain.append(passes.ZeroPointIntoBiasPass())
    chain += [common.RemoveUnusedNodesPass(), common.TopologicalSortPass(), common.CheckerPass()]
    return ir.passes.PassManager(chain)(model.clone()).model


def _input_zero_point(conv: ir.Node) -> int:
    return int(conv.inputs[0].producer().inputs[2].const_value.numpy())


def _convs(model: ir.Model) -> dict[str, ir.Node]:
    return {n.name: n for n in model.graph if n.op_type == "Conv"}


def test_convs_read_their_input_from_zero_padded_with_the_zero_point_and_compute_the_same():
    model = passes.cleanup(ir.serde.deserialize_model(mixed_ops_net()))
    kept, moved = _lowered(model, move=False), _lowered(model, move=True)
    signed = [name for name, conv in _convs(kept).items() if _input_zero_point(conv) != 0]
    # x, the upsampled Convs' outputs, and a SiLU's small negatives: all read at a zero point
    assert set(signed) == {"conv_a", "conv_b", "conv_c", "conv_out"}
    convs = _convs(moved)
    assert all(_input_zero_point(conv) == 0 for conv in convs.values())
    padded = {
        conv.name
        for conv in convs.values()
        if conv.inputs[0].producer().inputs[0].producer().op_type == "Pad"
    }
    assert padded == {"conv_a", "conv_b", "conv_c"}  # conv_out is 1x1, unpadded
    assert all(
        not any(conv.attributes["pads"].value) for conv in convs.values() if conv.name in padded
    )
    x = images(8)
    reference = run(kept, x)
    # the same integers; only float rounding of the scaled sums may differ
    assert np.abs(run(moved, x) - reference).max() < 1e-4 * np.abs(reference).max()


def _one_conv(**attributes) -> ir.Model:
    weights = np.random.default_rng(0).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attributes)]
    inits = [
        numpy_helper.from_array(weights, "w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "b"),
    ]
    return passes.cleanup(ir.serde.deserialize_model(image_model(nodes, inits, "one", 4)))


def test_a_conv_with_auto_pad_keeps_its_zero_point():
    moved = _lowered(_one_conv(auto_pad="SAME_UPPER"), move=True)
    assert _input_zero_point(_convs(moved)["conv"]) != 0
    assert "Pad" not in [n.op_type for n in moved.graph]


def test_a_conv_whose_bias_would_leave_int32_keeps_its_zero_point():
    model = _lowered(_one_conv(pads=[1, 1, 1, 1]), move=False)
    conv = _convs(model)["conv"]
    scale, zero_point = (v.const_value.numpy() for v in conv.inputs[0].producer().inputs[1:])
    bias = conv.inputs[2].producer()
    lowering = (
        raised_bias(conv, -float(scale) * int(zero_point)) - bias.inputs[0].const_value.numpy()
    )
    limit = np.iinfo(np.int32).max
    edge = np.where(lowering > 0, limit - 1, -limit + 1).astype(np.int32)  # one step from the edge
    bias.inputs[0].const_value = ir.Tensor(edge, name=bias.inputs[0].name)
    moved = passes.ZeroPointIntoBiasPass()(model).model
    assert _input_zero_point(_convs(moved)["conv"]) == int(zero_point) != 0


def _matmul(bias: bool) -> ir.Model:
    """x(N,3,16,16) @ W(16,8) [+ b] -> y: a MatMul that the clean-up leaves a MatMul."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p" if bias else "y"], name="matmul")]
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 8)).astype(np.float32), "w")]
    if bias:
        nodes.append(helper.make_node("Add", ["p", "b"], ["y"], name="bias"))
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b"))
    return ir.serde.deserialize_model(images_to(nodes, inits, "matmul", [3, 16, 8]))


def test_a_matmul_reads_its_input_from_zero_and_its_bias_add_takes_the_rest():
    model = _matmul(bias=True)  # the Add FP32: the MatMul's float output is read by it alone
    kept, moved = (_lowered(model, move, {"matmul"}) for move in (False, True))
    (matmul,) = [n for n in moved.graph if n.op_type == "MatMul"]
    assert _input_zero_point([n for n in kept.graph if n.op_type == "MatMul"][0]) != 0
    assert _input_zero_point(matmul) == 0
    x = images(8)
    reference = run(kept, x)
    assert np.abs(run(moved, x) - reference).max() < 1e-4 * np.abs(reference).max()


def test_a_matmul_without_a_bias_add_keeps_its_zero_point():
    moved = _lowered(_matmul(bias=False), move=True)
    (matmul,) = [n for n in moved.graph if n.op_type == "MatMul"]
    assert _input_zero_point(matmul) != 0


def _gemm(trans_b: int, bias: bool) -> ir.Model:
    """Flatten(x) -> Gemm(B (768, 8), or (8, 768) transposed [, C]) -> y."""
    rng = np.random.default_rng(0)
    shape = (8, 768) if trans_b else (768, 8)
    inputs = ["flat", "w", "b"] if bias else ["flat", "w"]
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], name="flatten"),
        helper.make_node("Gemm", inputs, ["y"], name="gemm", transB=trans_b),
    ]
    inits = [numpy_helper.from_array(rng.normal(0, 0.05, shape).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b"))
    return passes.cleanup(ir.serde.deserialize_model(images_to(nodes, inits, "gemm", [8])))


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("bias", [True, False])
def test_a_gemm_reads_its_input_from_zero_and_its_bias_takes_the_rest(trans_b, bias):
    model = _gemm(trans_b, bias)
    kept, moved = (_lowered(model, move) for move in (False, True))
    (before,) = [n for n in kept.graph if n.op_type == "Gemm"]
    (gemm,) = [n for n in moved.graph if n.op_type == "Gemm"]
    assert _input_zero_point(before) != 0
    assert _input_zero_point(gemm) == 0
    assert gemm.inputs[2].producer().inputs[0].const_value.dtype == ir.DataType.INT32
    x = images(8)
    reference = run(kept, x)
    assert np.abs(run(moved, x) - reference).max() < 1e-4 * np.abs(reference).max()


def test_a_gemm_that_scales_its_product_keeps_its_zero_point():
    model = _gemm(trans_b=0, bias=True)
    (gemm,) = [n for n in model.graph if n.op_type == "Gemm"]
    gemm.attributes["alpha"] = ir.AttrFloat32("alpha", 0.5)
    moved = _lowered(model, move=True)
    assert _input_zero_point([n for n in moved.graph if n.op_type == "Gemm"][0]) != 0
