import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from conftest import conv_net, images
from onnx import TensorProto, helper, numpy_helper
from onnx_ir.passes import common

from calibration import CalibrationSource, collect_histograms
from quantize import MinMax, NodeOverrides, Recipe, SmoothQuant, passes, quantize
from quantize.passes.fold_conv3d import FoldConv3DPass
from quantize.passes.smooth_activations import smoothing_scales
from quantize.pipeline import input_specs
from quantize.plan import QuantPlan
from quantize.runtime import session
from quantize.target import host_target, weight_qmax
from quantize.validate import run_with_outputs

HOST_WEIGHT_QMAX = weight_qmax(host_target())  # plans built by hand run on this machine's kernels


def _run(model, x):
    proto = model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)
    return session(proto).run(None, {"x": x})[0]


def _ops(model: ir.Model) -> list[str]:
    return [n.op_type for n in model.graph]


def test_batchnorm_folds_into_conv_with_the_same_outputs():
    original = conv_net()
    model = ir.serde.deserialize_model(original)
    result = passes.FoldBatchNormPass()(model)
    assert result.modified and "BatchNormalization" not in _ops(result.model)
    x = images(4)
    np.testing.assert_allclose(_run(result.model, x), _run(original, x), rtol=1e-4, atol=1e-5)


def test_constant_subgraphs_are_folded_and_the_function_kept():
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Transpose", ["ab"], ["abt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "abt"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "a"),
        numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "b"),
    ]
    original = helper.make_model(
        helper.make_graph(nodes, "g", [x_info], [y_info], inits),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    original.ir_version = 8
    result = passes.FoldConstantsPass()(ir.serde.deserialize_model(original))
    assert result.modified and _ops(result.model) == ["MatMul"]
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x), _run(original, x), rtol=1e-6)


def test_cleanup_removes_dead_nodes_and_names_every_node():
    original = conv_net()
    original.graph.node.append(helper.make_node("Relu", ["c1"], ["unused"]))
    cleaned = passes.cleanup(ir.serde.deserialize_model(original))
    assert (
        "BatchNormalization" not in _ops(cleaned)
        and len(cleaned.graph) == len(original.graph.node) - 2
    )
    assert all(n.name for n in cleaned.graph)
    x = images(2)
    np.testing.assert_allclose(_run(cleaned, x), _run(original, x), rtol=1e-4, atol=1e-5)


def _plan_for(model: ir.Model, nodes: set[str]) -> QuantPlan:
    """A plan with min/max ranges measured on random images."""
    names = [
        v.name
        for n in model.graph
        for v in [*n.inputs, *n.outputs]
        if v is not None and v.const_value is None
    ]
    x = images(64)
    source = CalibrationSource(
        Path("memory"),
        input_specs(ir.serde.serialize_model(model)),
        len(x),
        lambda a, b: {"x": x[a:b]},
    )
    histograms = collect_histograms(
        ir.serde.serialize_model(model), list(dict.fromkeys(names)), source, len(x)
    )
    return QuantPlan(
        nodes,
        {name: (min(h.min, 0.0), max(h.max, 0.0)) for name, h in histograms.items()},
        HOST_WEIGHT_QMAX,
    )


def test_qdq_insertion_gives_per_channel_int8_weights_and_int32_bias():
    model = passes.cleanup(ir.serde.deserialize_model(conv_net(batchnorm=False)))
    plan = _plan_for(model, {"conv1", "fc"})
    q = passes.lower_to_qdq(model, plan)
    dequantize = {n.outputs[0].name: n for n in q.graph if n.op_type == "DequantizeLinear"}
    conv = next(n for n in q.graph if n.name == "conv1")
    w_dq, b_dq = dequantize[conv.inputs[1].name], dequantize[conv.inputs[2].name]
    assert (
        w_dq.inputs[0].const_value.dtype == ir.DataType.INT8 and w_dq.attributes["axis"].value == 0
    )
    assert w_dq.inputs[1].const_value.shape.numpy() == (8,)
    assert b_dq.inputs[0].const_value.dtype == ir.DataType.INT32
    fc = next(n for n in q.graph if n.name == "fc")
    assert (
        dequantize[fc.inputs[1].name].attributes["axis"].value == 0
    )  # transB=1: rows are output channels
    assert dequantize[conv.inputs[0].name].inputs[0].producer().op_type == "QuantizeLinear"
    assert not any(
        v.dtype == ir.DataType.FLOAT and v.name in ("w1", "wf")
        for v in q.graph.initializers.values()
    )


def test_qdq_model_stays_close_to_fp32():
    original = conv_net(batchnorm=False)
    model = passes.cleanup(ir.serde.deserialize_model(original))
    x = images(8)
    plan = _plan_for(model, {n.name for n in model.graph if n.op_type in ("Conv", "Gemm", "Add")})
    q = passes.lower_to_qdq(model, plan)
    ref, got = _run(original, x), _run(q, x)
    assert 10 * np.log10(np.sum(ref**2) / np.sum((ref - got) ** 2)) > 25


def test_relu_after_a_quantized_op_is_absorbed_into_a_zero_point_of_zero():
    model = passes.cleanup(ir.serde.deserialize_model(conv_net(batchnorm=False)))
    plan = _plan_for(model, {"conv1"})
    plan.ranges["c1"] = (0.0, plan.ranges["r1"][1])
    plan.absorbed = {"relu1": "c1"}
    q = passes.lower_to_qdq(model, plan)
    assert "relu1" not in {n.name for n in q.graph}
    zero_point = q.graph.initializers["c1_zero_point"].const_value.numpy()
    assert zero_point == 0 and zero_point.dtype == np.uint8


def test_matmul_plus_bias_becomes_one_gemm():
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["b", "xw"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=(6, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=(1, 3)).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        inits,
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    model = passes.cleanup(ir.serde.deserialize_model(original))
    assert _ops(model) == ["Gemm"] and model.graph.outputs[0].name == "y"
    x = rng.normal(size=(5, 6)).astype(np.float32)
    np.testing.assert_allclose(_run(model, x), _run(original, x), rtol=1e-5, atol=1e-6)


def _conv3d_model(pads, bias: bool):
    rng = np.random.default_rng(0)
    inputs = ["x", "w"] + (["b"] if bias else [])
    inits = [numpy_helper.from_array(rng.normal(size=(5, 3, 3, 2, 4)).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(size=5).astype(np.float32), "b"))
    out_shape = [6 + pads[0] + pads[3] - 2, 7 + pads[1] + pads[4] - 1, 9 + pads[2] + pads[5] - 3]
    graph = helper.make_graph(
        [helper.make_node("Conv", inputs, ["y"], pads=pads, name="conv3d")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 7, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, *out_shape])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_conv3d_becomes_a_2d_conv_with_the_same_outputs():
    x = np.random.default_rng(1).normal(size=(2, 3, 6, 7, 9)).astype(np.float32)
    for pads, bias in (([0, 0, 0, 0, 0, 0], False), ([1, 0, 2, 2, 1, 0], True)):
        original = _conv3d_model(pads, bias)
        model = passes.cleanup(ir.serde.deserialize_model(original))
        convs = [n for n in model.graph if n.op_type == "Conv"]
        assert len(convs) == 1 and len(convs[0].inputs[1].const_value.shape) == 4
        assert model.graph.outputs[0].name == "y"
        np.testing.assert_allclose(_run(model, x), _run(original, x), rtol=1e-4, atol=1e-4)


def test_conv3d_computing_several_output_depths_per_window_keeps_the_outputs():
    x = np.random.default_rng(4).normal(size=(2, 3, 6, 7, 9)).astype(np.float32)
    for pads, bias, axis in (
        ([0, 0, 0, 0, 0, 0], False, 0),
        ([1, 0, 2, 1, 0, 2], True, 1),
        ([1, 1, 1, 1, 1, 1], True, 0),
    ):
        original = _conv3d_model(pads, bias)
        a_out = (6, 7, 9)[axis] + pads[axis] + pads[axis + 3] - (2, 1, 3)[axis]
        for group in [s for s in range(2, a_out + 1) if a_out % s == 0]:

            class Grouped(FoldConv3DPass):
                def outputs_per_window(self, k, ka, a_out, group=group):
                    return group

            model = ir.passes.PassManager([common.ShapeInferencePass(), Grouped()])(
                ir.serde.deserialize_model(original)
            ).model
            conv = next(n for n in model.graph if n.op_type == "Conv")
            assert conv.inputs[1].const_value.shape[0] == 5 * group
            np.testing.assert_allclose(_run(model, x), _run(original, x), rtol=1e-4, atol=1e-4)


def test_few_output_channels_are_computed_several_depths_per_window():
    fold = FoldConv3DPass()
    assert fold.outputs_per_window(k=64, ka=6, a_out=8) == 1  # 64 channels fill the kernel's blocks
    assert fold.outputs_per_window(k=6, ka=3, a_out=26) == 2  # 12 of 16 for 4/3 the work
    assert fold.outputs_per_window(k=1, ka=2, a_out=25) == 5


def test_transpose_pairs_that_undo_each_other_are_removed():
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4, 5])],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    model = passes.cleanup(ir.serde.deserialize_model(original))
    assert _ops(model) == ["Relu"]
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(_run(model, x), _run(original, x))


def test_conv3d_folds_an_unpadded_axis_and_needs_no_pad():
    x = np.random.default_rng(2).normal(size=(2, 3, 6, 7, 9)).astype(np.float32)
    for pads in ([1, 0, 2, 1, 0, 2], [1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1]):
        original = _conv3d_model(pads, bias=True)
        model = passes.cleanup(ir.serde.deserialize_model(original))
        assert ("Pad" in _ops(model)) == (min(pads[a] + pads[a + 3] for a in range(3)) > 0), pads
        np.testing.assert_allclose(_run(model, x), _run(original, x), rtol=1e-4, atol=1e-4)


def test_zero_pad_through_a_layout_transpose_folds_into_the_conv():
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"]),
        helper.make_node("Transpose", ["p"], ["t"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["t", "w"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([0, 1, 2, 0, 0, 1, 2, 0], np.int64), "pads"),
        numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5, 6, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 5, 8])],
        inits,
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    model = passes.cleanup(ir.serde.deserialize_model(original))
    assert _ops(model) == ["Transpose", "Conv"]
    x = rng.normal(size=(2, 5, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(model, x), _run(original, x), rtol=1e-5, atol=1e-5)


def _outlier_net(residual: bool) -> onnx.ModelProto:
    """x (N,16) -> LayerNorm with two huge channels -> MatMul W -> y (and the LN output h as a
    second model output when `residual`: another reader of h)."""
    rng = np.random.default_rng(3)
    gamma = np.ones(16, np.float32)
    gamma[[3, 11]] = 40.0
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], axis=-1, name="norm"),
        helper.make_node("MatMul", ["h", "w"], ["p"], name="proj"),
    ]
    nodes.append(helper.make_node("Identity", ["p"], ["y"], name="out"))
    w = rng.normal(0, 0.3, (16, 16)).astype(np.float32)
    w[[3, 11]] *= 0.01  # as in trained transformers, the outlier channels barely reach the output
    inits = [
        numpy_helper.from_array(gamma, "gamma"),
        numpy_helper.from_array(np.zeros(16, np.float32), "beta"),
        numpy_helper.from_array(w, "w"),
    ]
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 16])
        for n in (("y", "h") if residual else ("y",))
    ]
    graph = helper.make_graph(
        nodes,
        "outliers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_smoothing_folds_into_a_layernorm_read_only_by_gemms_and_keeps_the_function():
    original = _outlier_net(residual=False)
    model = ir.serde.deserialize_model(original)
    x = np.random.default_rng(0).normal(0, 1, (32, 16)).astype(np.float32)
    absmax = {"h": np.array([1.0] * 3 + [40.0] + [1.0] * 7 + [40.0] + [1.0] * 4)}
    scales = smoothing_scales(model, absmax, alpha=0.8)
    assert scales["h"][3] > 10 * scales["h"][0]
    smoothed = passes.SmoothActivationsPass(scales)(model).model
    assert "Mul" not in _ops(smoothed)  # folded into gamma and beta
    np.testing.assert_allclose(_run(smoothed, x), _run(original, x), rtol=1e-4, atol=1e-4)


def test_smoothing_adds_a_mul_when_the_activation_has_other_readers_and_improves_int8():
    original = _outlier_net(residual=True)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (32, 16)).astype(np.float32)} for _ in range(10)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(original, str(path))
        plain = quantize(
            path, feeds, Recipe.transformer(smoothing=None, overrides=NodeOverrides(fp32=()))
        )
        smooth = quantize(
            path,
            feeds,
            Recipe.transformer(smoothing=SmoothQuant(0.8), overrides=NodeOverrides(fp32=())),
        )
    assert "h_smooth" in {
        n.name for n in smooth.fp32_model.graph.node
    }  # the output h stays unscaled
    x = feeds[-1]["x"]
    np.testing.assert_allclose(
        session(smooth.fp32_model).run(None, {"x": x})[0], _run(original, x), rtol=1e-4, atol=1e-3
    )
    assert smooth.output_sqnr_db["y"] > plain.output_sqnr_db["y"] + 3


def _gelu_net() -> onnx.ModelProto:
    """x (N,16) -> MatMul -> GELU written out as exporters do (x * (1 + erf(x / sqrt 2)) * 0.5)
    -> MatMul -> y; the first weight makes two GELU channels huge."""
    rng = np.random.default_rng(4)
    w1 = rng.normal(0, 0.3, (16, 16)).astype(np.float32)
    w1[:, [2, 9]] *= 60
    w2 = rng.normal(0, 0.3, (16, 16)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="gelu/div"),
        helper.make_node("Erf", ["d"], ["e"], name="gelu/erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="gelu/add"),
        helper.make_node("Mul", ["h", "a"], ["m"], name="gelu/mul"),
        helper.make_node("Mul", ["m", "half"], ["g"], name="gelu/mul_1"),
        helper.make_node("MatMul", ["g", "w2"], ["y"], name="down"),
    ]
    inits = [
        numpy_helper.from_array(w1, "w1"),
        numpy_helper.from_array(w2, "w2"),
        numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_smoothing_after_an_erf_gelu_folds_into_its_constant_mul_and_keeps_the_function():
    original = _gelu_net()
    model = ir.serde.deserialize_model(original)
    x = np.random.default_rng(5).normal(0, 1, (64, 16)).astype(np.float32)
    g = run_with_outputs(original, ["g"], {"x": x}, threads=0)[0]
    scales = smoothing_scales(
        model, {"g": np.abs(g).max(axis=0), "x": np.abs(x).max(axis=0)}, alpha=0.8
    )
    assert set(scales) == {"g"}  # x is a graph input, not a LayerNorm or GELU output
    assert scales["g"][2] > 5 * np.median(scales["g"])
    smoothed = passes.SmoothActivationsPass(scales)(model).model
    assert _ops(smoothed).count("Mul") == 2  # no scaling Mul: 1/s went into the 0.5
    np.testing.assert_allclose(_run(smoothed, x), _run(original, x), rtol=1e-4, atol=1e-3)


def test_a_lone_weight_matmul_becomes_a_gemm_so_ort_cannot_fold_it_into_a_float_residual_gemm():
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
        helper.make_node("Add", ["p", "x"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(
        nodes,
        "lone",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(rng.normal(0, 1, (8, 8)).astype(np.float32), "w")],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    cleaned = passes.cleanup(ir.serde.deserialize_model(original))
    assert _ops(cleaned) == ["Gemm", "Add"]
    x = rng.normal(0, 1, (4, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(cleaned, x), _run(original, x), rtol=1e-5, atol=1e-5)


def test_a_planned_node_that_ort_fused_and_renamed_is_still_found_in_float():
    from quantize.coverage import float_islands

    nodes = [
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
        helper.make_node("Gemm", ["d", "w", "r"], ["y"], name="proj/MatMulAddFusion"),
    ]
    graph = helper.make_graph(nodes, "g", [], [])
    assert float_islands(graph, {"proj"}) == {"proj"}
    assert float_islands(graph, {"other"}) == set()


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
    exact = np.abs(_run(_conv_read_by_fp32(), x))
    ranges = {"x": (0.0, 1.0), "c": (-float(exact.max()), float(exact.max()))}
    coarse = ir.serde.serialize_model(
        passes.lower_to_qdq(
            _conv_read_by_fp32(), QuantPlan({"conv"}, dict(ranges), HOST_WEIGHT_QMAX)
        )
    )
    widened = ir.serde.serialize_model(
        passes.lower_to_qdq(
            _conv_read_by_fp32(), QuantPlan({"conv"}, dict(ranges), HOST_WEIGHT_QMAX, wide={"conv"})
        )
    )
    assert kernel_counts(optimized_graph(widened))["int8"]["QLinearConv"] == 2
    got_coarse, got_wide = _run(coarse, x), _run(widened, x)
    fine_limit = exact.max() / FINE_RATIO
    small, large = exact < 0.8 * fine_limit, exact > 1.2 * fine_limit
    assert (
        small.mean() > 0.5 and large.any()
    )  # channel 0 sets the range; the other three stay near zero
    # 16x finer output rounding; the input's rounding, common to both, keeps the ratio near 5
    assert np.std((got_wide - exact)[small]) < np.std((got_coarse - exact)[small]) / 4
    coarse_step = 2 * exact.max() / 255
    assert np.abs(got_wide - got_coarse)[large].max() <= coarse_step / FINE_RATIO + 1e-5


def test_a_concat_before_an_fp32_conv_stays_fp32():
    """The 3D-to-2D windows of an excluded Conv: quantizing their Concat rounds its input."""
    from quantize.policy import select_nodes

    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        helper.make_node("Concat", ["c1", "c1"], ["cat"], axis=1, name="concat"),
        helper.make_node("Conv", ["cat", "w2"], ["y"], name="conv2"),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=(2, 1, 1, 1)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(size=(1, 4, 1, 1)).astype(np.float32), "w2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 4, 4])],
        inits,
    )
    model = passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )
    assert "concat" in select_nodes(model).int8
    assert select_nodes(model, exclude=("conv2",)).int8 == {"conv1"}


def _upsampled_conv_model(factors, pads, conv_pads, nearest: bool = True) -> onnx.ModelProto:
    """x (N,3,4,5,3) -> nearest upsampling by `factors` as Keras exports it (Unsqueeze, Tile,
    Reshape per axis; with nearest=False, a plain Tile: x repeated as a whole) -> zero Pad ->
    Conv3D (4 channels, kernel 3x2x4, bias)."""
    rng = np.random.default_rng(0)
    shape, nodes, inits, value = [3, 4, 5, 3], [], [], "x"
    for axis, f in zip(range(2, 5), factors):
        repeats = [1] * 6
        repeats[axis + 1] = f
        shape[axis - 1] *= f
        names = [f"{n}{axis}" for n in ("axes", "repeats", "shape", "u", "t", "r")]
        inits += [
            numpy_helper.from_array(np.array([axis + 1], np.int64), names[0]),
            numpy_helper.from_array(np.array(repeats, np.int64), names[1]),
            numpy_helper.from_array(np.array([-1, *shape], np.int64), names[2]),
        ]
        if nearest:
            nodes += [
                helper.make_node("Unsqueeze", [value, names[0]], [names[3]]),
                helper.make_node("Tile", [names[3], names[1]], [names[4]]),
                helper.make_node("Reshape", [names[4], names[2]], [names[5]]),
            ]
        else:
            whole = [1] * 5
            whole[axis] = f
            nodes.append(helper.make_node("Tile", [value, f"whole_{names[1]}"], [names[5]]))
            inits.append(numpy_helper.from_array(np.array(whole, np.int64), f"whole_{names[1]}"))
        value = names[5]
    inits += [
        numpy_helper.from_array(np.array([0, 0, *pads[:3], 0, 0, *pads[3:]], np.int64), "pads"),
        numpy_helper.from_array(rng.normal(size=(4, 3, 3, 2, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=4).astype(np.float32), "b"),
    ]
    nodes += [
        helper.make_node("Pad", [value, "pads"], ["padded"]),
        helper.make_node("Conv", ["padded", "w", "b"], ["y"], pads=conv_pads, name="conv"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_upsampling_folds_into_the_conv_that_reads_it_with_the_same_outputs():
    x = np.random.default_rng(2).normal(size=(2, 3, 4, 5, 3)).astype(np.float32)
    for factors, pads, conv_pads in (
        ((2, 2, 3), [1, 0, 3, 1, 0, 3], [0] * 6),
        ((2, 1, 2), [0, 2, 1, 2, 0, 0], [1, 0, 2, 0, 1, 1]),
    ):
        original = _upsampled_conv_model(factors, pads, conv_pads)
        cleaned = passes.cleanup(ir.serde.deserialize_model(original))
        assert "Tile" not in _ops(cleaned)
        conv = next(n for n in cleaned.graph if n.op_type == "Conv")
        assert conv.name == "conv" and conv.inputs[1].const_value.shape[0] == 4 * int(
            np.prod(factors)
        )  # a (phase, channel) output each
        np.testing.assert_allclose(_run(cleaned, x), _run(original, x), rtol=1e-4, atol=1e-4)


def test_a_tile_that_is_not_a_nearest_upsampling_is_not_folded():
    x = np.random.default_rng(3).normal(size=(2, 3, 4, 5, 3)).astype(np.float32)
    original = _upsampled_conv_model((2, 1, 2), [0] * 6, [0] * 6, nearest=False)
    cleaned = passes.cleanup(ir.serde.deserialize_model(original))
    assert "Tile" in _ops(cleaned)
    np.testing.assert_allclose(_run(cleaned, x), _run(original, x), rtol=1e-4, atol=1e-4)


def test_a_reshape_that_splits_axes_moves_before_a_transpose_which_merges_with_the_next():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "split"], ["s"]),
        helper.make_node("Transpose", ["s"], ["y"], perm=[0, 3, 1, 4, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([-1, 6, 3, 2, 2], np.int64), "split")],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cleaned = passes.cleanup(ir.serde.deserialize_model(original))
    assert _ops(cleaned) == ["Reshape", "Transpose"]
    x = np.random.default_rng(4).normal(size=(2, 4, 6, 3)).astype(np.float32)
    np.testing.assert_array_equal(_run(cleaned, x), _run(original, x))


def test_a_reshape_that_merges_axes_stays_after_the_transpose():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "merge"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([-1, 18, 4], np.int64), "merge")],
    )
    cleaned = passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )
    assert _ops(cleaned) == ["Transpose", "Reshape"]


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
            QuantPlan({"conv"}, dict(ranges), HOST_WEIGHT_QMAX, wide={"conv"}),
        )
    )
    both = ir.serde.serialize_model(
        passes.lower_to_qdq(
            _identity_conv_read_by_fp32(),
            QuantPlan({"conv"}, dict(ranges), HOST_WEIGHT_QMAX, wide={"conv"}, residual={"conv"}),
        )
    )
    assert kernel_counts(optimized_graph(both))["int8"]["QLinearConv"] == 3
    small = x < 1  # the 30s are beyond the fine output range, and saturate the coarse one
    error_widened, error_both = (np.std((_run(m, x) - x)[small]) for m in (widened, both))
    assert error_both < error_widened / 20


def test_data_movement_between_an_fp32_op_and_an_int8_conv_runs_on_uint8_at_one_range():
    """Abs -> two Slices -> Concat -> Conv: the Slices and the Concat are quantized with the
    Abs output's range, so the Conv's input is rounded once."""
    from quantize.plan import make_plan
    from quantize.policy import select_nodes

    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),
        helper.make_node("Slice", ["a", "zero", "four", "two"], ["s1"], name="slice1"),
        helper.make_node("Slice", ["a", "four", "eight", "two"], ["s2"], name="slice2"),
        helper.make_node("Concat", ["s1", "s2"], ["cat"], axis=1, name="concat"),
        helper.make_node("Conv", ["cat", "w"], ["y"], name="conv"),
    ]
    inits = [
        numpy_helper.from_array(np.array([v], np.int64), n)
        for n, v in (("zero", 0), ("four", 4), ("eight", 8), ("two", 2))
    ]
    inits.append(numpy_helper.from_array(rng.normal(size=(2, 2, 3, 3)).astype(np.float32), "w"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )
    chosen = select_nodes(model).int8
    assert chosen == {"slice1", "slice2", "concat", "conv"}
    x = np.random.default_rng(7).normal(size=(64, 1, 8, 8)).astype(np.float32)
    source = CalibrationSource(
        Path("memory"),
        input_specs(ir.serde.serialize_model(model)),
        len(x),
        lambda a, b: {"x": x[a:b]},
    )
    names = ["a", "s1", "s2", "cat", "y"]
    plan = make_plan(
        model,
        chosen,
        collect_histograms(ir.serde.serialize_model(model), names, source, len(x)),
        Recipe(ranges=MinMax(), target="vnni"),
    )
    assert plan.ranges["cat"] == plan.ranges["s1"] == plan.ranges["s2"] == plan.ranges["a"]


def test_data_movement_whose_shape_is_read_stays_fp32():
    """Abs -> Transpose -> Conv with a Shape of the Transpose: in uint8 the Transpose would
    need a DequantizeLinear of its whole output just for that Shape."""
    from quantize.policy import select_nodes

    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),
        helper.make_node("Transpose", ["a"], ["t"], perm=[0, 1, 3, 2], name="transpose"),
        helper.make_node("Shape", ["t"], ["shape"], name="shape"),
        helper.make_node("Conv", ["t", "w"], ["y"], name="conv"),
    ]
    weight = numpy_helper.from_array(
        np.random.default_rng(8).normal(size=(2, 1, 3, 3)).astype(np.float32), "w"
    )
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, "H", 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("shape", TensorProto.INT64, None),
        ],
        [weight],
    )
    model = passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )
    assert select_nodes(model).int8 == {"conv"}
