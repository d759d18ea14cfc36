"""`SmoothActivationsPass` (quantize/passes/smooth_activations.py) on small hand-built graphs."""

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from graphs import ops, run
from onnx import TensorProto, helper, numpy_helper

from quantize import NodeOverrides, Recipe, SmoothQuant, passes, quantize
from quantize.passes.smooth_activations import smoothing_scales
from quantize.pipeline import keep_fp32
from quantize.recipe import AUTO_ALPHA, NARROW_ALPHAS
from quantize.runtime import session
from quantize.validate import run_with_outputs


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
    assert "Mul" not in ops(smoothed)  # folded into gamma and beta
    np.testing.assert_allclose(run(smoothed, x), run(original, x), rtol=1e-4, atol=1e-4)


def _quantized(original: onnx.ModelProto, recipe: Recipe):
    """The calibration feeds of an (N,16) net and its INT8 result under `recipe`."""
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (32, 16)).astype(np.float32)} for _ in range(10)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save(original, str(path))
        return feeds, quantize(path, feeds, recipe)


def _quantized_with_residual(smoothing: SmoothQuant | None):
    """The residual outlier net, its calibration feeds, and its INT8 result with `smoothing`."""
    original = _outlier_net(residual=True)
    recipe = Recipe.transformer(
        smoothing=smoothing, overrides=NodeOverrides(fp32=()), kernel_timing=False
    )
    return original, *_quantized(original, recipe)


def test_smoothing_adds_a_mul_when_the_activation_has_other_readers_and_improves_int8():
    _, _, plain = _quantized_with_residual(None)
    original, feeds, smooth = _quantized_with_residual(SmoothQuant(0.8))
    assert "h_smooth" in {
        n.name for n in smooth.fp32_model.graph.node
    }  # the output h stays unscaled
    decision = next(d for d in smooth.decisions if d.name == "h_smooth")
    assert decision.precision == "fp32" and decision.reason.startswith("SmoothQuant's scaling")
    x = feeds[-1]["x"]
    np.testing.assert_allclose(
        session(smooth.fp32_model).run(None, {"x": x})[0], run(original, x), rtol=1e-4, atol=1e-3
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


def test_smoothing_after_an_erf_gelu_leaves_it_whole_for_onnx_runtime_to_fuse():
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
    assert ops(smoothed).count("Mul") == 3  # the GELU's two, and the scaling Mul after it
    np.testing.assert_allclose(run(smoothed, x), run(original, x), rtol=1e-4, atol=1e-3)
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        session(ir.serde.serialize_model(smoothed), optimized_path=optimized)
        # 1/s folded into the GELU's 0.5 would stop ORT's fusion
        assert "Gelu" in [n.op_type for n in onnx.load(optimized).graph.node]


def test_a_scaling_mul_whose_gemm_falls_back_to_fp32_is_folded_back_into_the_weight():
    original, feeds, smooth = _quantized_with_residual(SmoothQuant(0.8))
    fallen_back = keep_fp32(smooth, {"proj": "a fallback"})
    assert "h_smooth" in {n.name for n in smooth.model.graph.node}
    assert "h_smooth" not in {n.name for n in fallen_back.model.graph.node}
    assert "h_smooth" not in {d.name for d in fallen_back.decisions}
    proj = next(n for n in fallen_back.model.graph.node if n.name == "proj")
    assert proj.input[0] == "h"
    x = feeds[-1]["x"]
    np.testing.assert_allclose(
        session(fallen_back.model).run(None, {"x": x})[0], run(original, x), rtol=1e-4, atol=1e-4
    )


def _quantized_outlier_net(smoothing: SmoothQuant, weights: str, outliers: bool = True):
    """The outlier net (without its outlier channels unless `outliers`) quantized for the avx2
    target with `weights`."""
    original = _outlier_net(residual=False)
    if not outliers:
        original.graph.initializer[0].CopyFrom(
            numpy_helper.from_array(np.ones(16, np.float32), "gamma")
        )
    recipe = Recipe.transformer(
        smoothing=smoothing, target="avx2", weights=weights, kernel_timing=False
    )
    return _quantized(original, recipe)[1]


def test_auto_alpha_takes_the_best_held_out_sqnr_among_its_candidates_with_int7_weights(
    monkeypatch,
):
    auto = _quantized_outlier_net(SmoothQuant("auto"), "int7")
    chosen = auto.recipe.smoothing.alpha
    fixed = {a: _quantized_outlier_net(SmoothQuant(a), "int7") for a in NARROW_ALPHAS}
    sqnr = {a: r.output_sqnr_db["y"] for a, r in fixed.items()}
    assert chosen in NARROW_ALPHAS and sqnr[chosen] == max(sqnr.values()) > min(sqnr.values())
    monkeypatch.setattr("quantize.recipe.NARROW_ALPHAS", NARROW_ALPHAS[::-1])  # not by its place
    assert _quantized_outlier_net(SmoothQuant("auto"), "int7").recipe.smoothing.alpha == chosen
    assert auto.output_sqnr_db["y"] == pytest.approx(sqnr[chosen], abs=1e-6)
    assert auto.smoothing.startswith(f"alpha {chosen:g}, the best held-out output SQNR")
    assert all(f"{a:g}: {db:.1f} dB" in auto.smoothing for a, db in sqnr.items())
    assert Recipe.from_model(auto.model).smoothing == SmoothQuant(chosen)  # re-made as it was


def test_auto_alpha_is_the_presets_alpha_with_8_bit_weights():
    result = _quantized_outlier_net(SmoothQuant("auto"), "uint8")
    assert result.recipe.smoothing == SmoothQuant(AUTO_ALPHA)
    assert result.smoothing == f"alpha {AUTO_ALPHA:g}"


def test_auto_alpha_has_nothing_to_choose_without_outlier_channels():
    result = _quantized_outlier_net(SmoothQuant("auto"), "int7", outliers=False)
    assert result.recipe.smoothing == SmoothQuant(AUTO_ALPHA)
    assert result.smoothing == f"alpha {AUTO_ALPHA:g} (no outlier channels: nothing to choose)"
