"""The 3DGAN's validation report through the core: `--evaluate calogan` adds the physics of the
FP32 and INT8 generators against simulated showers, with plots, and extra generators beside them."""

import json

import keras
import matplotlib  # noqa: F401  (a required dependency: missing, it fails the suite)
import numpy as np
import onnx
import onnx_ir as ir
import pytest

from models.calogan.evaluate import PhysicsEvaluator  # noqa: E402
from models.calogan.generate import EnergyRangeModels, latents, onnx_source  # noqa: E402
from models.calogan.network import generator  # noqa: E402
from models.calogan.train import CELL_SCALE  # noqa: E402
from physics_metrics.features import HIT_THRESHOLD_GEV  # noqa: E402
from quantize import Recipe, RunOptions, quantize, report  # noqa: E402
from quantize.frontend.tensorflow import keras_to_onnx  # noqa: E402
from quantize.pipeline import WHOLE_FP32, cleaned_fp32  # noqa: E402


def test_report_has_the_physics_section_with_a_rival_beside_ours(tmp_path):
    keras.utils.set_random_seed(0)
    fp32 = keras_to_onnx(generator())
    onnx.save(fp32, tmp_path / "g.onnx")
    np.save(
        tmp_path / "latents.npy", latents(np.random.default_rng(0).uniform(10, 500, 96), seed=1)
    )
    result = quantize(
        tmp_path / "g.onnx",
        tmp_path / "latents.npy",
        Recipe.generator(ir.from_proto(fp32), kernel_timing=False),
        RunOptions(calib_samples=64),
    )
    halved = onnx_source(fp32)
    evaluator = PhysicsEvaluator(per_bin=12, extra={"half FP32": lambda z, e: 0.5 * halved(z, e)})
    summary = report.evaluate(report.summarize(result), result, evaluator, seconds=0.2)
    json_path = report.write(summary, tmp_path / "report.html")

    physics = json.loads(json_path.read_text())["sections"][0]["data"]
    assert set(physics["vs_reference"]) == {"FP32", "INT8 (quantize)", "half FP32"}
    assert summary["metric"]["fp32"] == pytest.approx(
        physics["vs_reference"]["FP32"]["combined_3dgan"]
    )
    shifts = [row["sampling_fraction_shift"] for row in physics["vs_baseline"]["half FP32"]["bins"]]
    np.testing.assert_allclose(shifts, -0.5, atol=1e-4)  # the extra generator saw the same latents
    page = (tmp_path / "report.html").read_text()
    assert (
        "Physics: 84 showers in 7 energy bins" in page and page.count("data:image/png;base64,") == 5
    )
    assert "data:image/png" not in json_path.read_text()


def test_energy_range_models_route_each_shower_to_the_model_of_its_range(tmp_path):
    from models.calogan.generate import energy_edges, quantize_by_energy, range_index

    keras.utils.set_random_seed(0)
    onnx.save(keras_to_onnx(generator()), tmp_path / "g.onnx")
    ranges = quantize_by_energy(
        tmp_path / "g.onnx", energy_edges(2, 2.0, 200.0), samples=64, kernel_timing=False
    )
    assert ranges.edges.tolist() == pytest.approx([2.0, 20.0, 200.0])
    np.testing.assert_array_equal(
        range_index(ranges.edges, np.array([1.0, 5.0, 19.5, 20.5, 150.0, 900.0])),
        [0, 0, 0, 1, 1, 1],
    )
    scales = [
        {
            i.name: onnx.numpy_helper.to_array(i).tolist()
            for i in m.graph.initializer
            if i.name.endswith("_scale")
        }
        for m in ranges.models
    ]
    assert scales[0] != scales[1]  # each range calibrated on its own energies
    energies = np.array([5.0, 150.0, 6.0, 120.0])
    z = latents(energies, seed=3)
    mixed = ranges.source()(z, energies)
    np.testing.assert_array_equal(
        mixed[[0, 2]], onnx_source(ranges.models[0])(z[[0, 2]], energies[[0, 2]])
    )
    np.testing.assert_array_equal(
        mixed[[1, 3]], onnx_source(ranges.models[1])(z[[1, 3]], energies[[1, 3]])
    )


def test_a_range_whose_corrected_int8_times_slower_than_fp32_keeps_fp32_and_says_why(
    tmp_path, monkeypatch
):
    import quantize.pipeline
    from models.calogan.generate import energy_edges, quantize_by_energy

    timed = []

    def int8_slower(result, models, seconds):  # what this machine measures is not the point
        timed.append(models["int8"])
        return {"fp32": 10.0, "int8": 20.0}

    monkeypatch.setattr(quantize.pipeline, "latencies_ms", int8_slower)
    # nor which nodes its kernel timing keeps FP32: the check on the whole model would time too
    monkeypatch.setattr(quantize.pipeline, "_slower_in_int8", lambda *args: {})
    keras.utils.set_random_seed(0)
    fp32 = keras_to_onnx(generator())
    onnx.save(fp32, tmp_path / "g.onnx")
    ranges = quantize_by_energy(
        tmp_path / "g.onnx", energy_edges(1, 50.0, 100.0), samples=64, speed_check=True
    )
    assert any(n.name.startswith("cell_map_") for n in timed[0].graph.node)  # timed corrected
    (check,) = ranges.speed_checks
    assert "INT8 0.50x the FP32 graph's speed" in check and check.endswith(WHOLE_FP32)
    (model,) = ranges.models
    ops = sorted(n.op_type for n in model.graph.node)
    assert ops == sorted(n.op_type for n in cleaned_fp32(tmp_path / "g.onnx").graph.node)
    z = latents(np.full(8, 70.0), seed=4)
    np.testing.assert_allclose(
        onnx_source(model)(z, None), onnx_source(fp32)(z, None), rtol=1e-4, atol=1e-6
    )
    ranges.save(tmp_path / "int8")
    assert EnergyRangeModels.load(tmp_path / "int8").speed_checks == [check]


@pytest.fixture(scope="module")
def generator_and_int8(tmp_path_factory):
    """A random-weight generator, its INT8 model (output convolution in FP32) and the latents of both."""
    path = tmp_path_factory.mktemp("generator") / "g.onnx"
    keras.utils.set_random_seed(0)
    fp32 = keras_to_onnx(generator())
    onnx.save(fp32, path)
    z = latents(np.random.default_rng(0).uniform(50, 100, 128), seed=1)
    batches = [{"latent": z[i : i + 64]} for i in range(0, len(z), 64)]
    return (
        fp32,
        quantize(path, batches, Recipe.generator(ir.from_proto(fp32), kernel_timing=False)).model,
        z,
    )


def test_the_cell_correction_restores_fp32s_energy_from_an_excess_or_a_deficit_and_the_graph_computes_its_numpy_twin(
    generator_and_int8,
):
    from models.calogan.generate import final_relu_inputs, output_cell_maps

    fp32, int8, z = generator_and_int8
    output_conv = next(
        n
        for n in int8.graph.node
        if n.name == Recipe.generator(ir.from_proto(fp32)).overrides.fp32[0]
    )

    def scaled(gain):  # the output convolution's kernel x gain: an energy excess or deficit
        model = onnx.ModelProto()
        model.CopyFrom(int8)
        kernel = next(t for t in model.graph.initializer if t.name == output_conv.input[1])
        kernel.CopyFrom(
            onnx.numpy_helper.from_array(gain * onnx.numpy_helper.to_array(kernel), kernel.name)
        )
        return model

    def showers(model, latent):
        return onnx_source(model)(latent, None)

    target = showers(fp32, z).sum()
    brightened, dimmed = scaled(1.1), scaled(0.9)
    assert showers(brightened, z).sum() > 1.05 * target
    assert showers(dimmed, z).sum() < 0.95 * target
    unseen = latents(np.random.default_rng(2).uniform(50, 100, 128), seed=3)
    target_unseen = showers(fp32, unseen).sum()
    for model in (brightened, dimmed):
        maps = output_cell_maps(fp32, model, z)
        corrected = maps.replace_relu(model)
        assert showers(corrected, z).sum() == pytest.approx(target, rel=1e-3)
        twin = maps.apply(final_relu_inputs(model, unseen).reshape(len(unseen), -1), unseen)
        corrected_unseen = showers(corrected, unseen)
        np.testing.assert_allclose(
            corrected_unseen.reshape(len(unseen), -1), twin / CELL_SCALE, rtol=1e-4, atol=1e-7
        )
        before, after = (
            energy / target_unseen - 1
            for energy in (showers(model, unseen).sum(), corrected_unseen.sum())
        )  # beyond its latents
        assert abs(after) < 0.2 * abs(before)
        assert _largest_correction_tensor(corrected) <= _halo_bound(maps)


def _halo_bound(maps) -> int:
    """Values a shower that a correction evaluating its extra knots on the halo only holds at most:
    2 maps x every cell for the first knot, 2 maps x the other knots x the halo cells."""
    extra = np.any(maps.slopes[:, 1:] != 0, axis=(0, 1))
    return 2 * max(extra.size, (maps.slopes.shape[1] - 1) * int(extra.sum()))


def _largest_correction_tensor(model) -> int:
    """The most values a shower that one tensor of the cell correction holds (batch dims as 1)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    return max(
        int(np.prod([d.dim_value or 1 for d in v.type.tensor_type.shape.dim]))
        for v in inferred.graph.value_info
        if v.name.startswith("cell_map_")
    )


def test_halo_cells_get_the_hits_of_fp32_that_a_bias_alone_would_lose_and_the_core_keeps_its_mean():
    from models.calogan.cell_maps import _cell_corrections, _single_map, apply_cell_map

    threshold = HIT_THRESHOLD_GEV * CELL_SCALE
    rng = np.random.default_rng(0)

    def cells(
        n,
    ):  # FP32 pre-activations of a halo, a core and a far cell; INT8 adds rounding noise of 5x the threshold (400 GeV: 8x)
        fp32 = rng.normal(
            [-threshold, 50 * threshold, -30 * threshold],
            [1.5 * threshold, 10 * threshold, threshold],
            (n, 3),
        )
        return fp32 + rng.normal(0, 5 * threshold, fp32.shape), np.maximum(fp32, 0)

    int8, fp32 = cells(4096)
    knots, slopes = _single_map(int8, fp32, threshold, steps=24)
    gain, bias = _cell_corrections(int8, fp32.mean(axis=0), steps=24)
    np.testing.assert_allclose(
        apply_cell_map(int8, knots, slopes).mean(axis=0), fp32.mean(axis=0), rtol=1e-4, atol=1e-9
    )
    unseen_int8, unseen_fp32 = cells(20000)
    hits = {
        name: (out > threshold).mean(axis=0)
        for name, out in (
            ("fp32", unseen_fp32),
            ("mapped", apply_cell_map(unseen_int8, knots, slopes)),
            ("bias only", np.maximum(gain * unseen_int8 + bias, 0)),
        )
    }
    assert 0.05 < hits["fp32"][0] < 0.5 and hits["fp32"][1] == 1 and hits["fp32"][2] == 0
    shift = {name: hits[name][0] / hits["fp32"][0] - 1 for name in ("mapped", "bias only")}
    assert (
        abs(shift["mapped"]) < 0.05 and abs(shift["bias only"]) > 0.2
    )  # the halo: quantile to quantile
    assert (
        slopes[1:, 1:].max() == 0 and hits["mapped"][2] == 0
    )  # core and far cell: one bias or gain
    assert apply_cell_map(unseen_int8, knots, slopes)[:, 1].mean() == pytest.approx(
        unseen_fp32[:, 1].mean(), rel=2e-3
    )


def test_a_far_cell_that_int8_rarely_lights_is_not_scaled_up_to_fp32s_mean():
    from models.calogan.cell_maps import MAX_GAIN, _cell_corrections, apply_cell_map

    threshold = HIT_THRESHOLD_GEV * CELL_SCALE
    int8 = np.full((4096, 1), -threshold)
    int8[0] = threshold  # one shower in 4096 lights it
    target = np.array([threshold])  # FP32 lights it in every shower: gain 4096 would match
    gain, bias = _cell_corrections(int8, target, steps=24)
    assert gain[0] == MAX_GAIN and bias[0] == 0
    assert apply_cell_map(int8[:1], [-bias / gain], [gain])[0, 0] == pytest.approx(
        MAX_GAIN * threshold
    )


def test_maps_blended_by_the_latent_norm_follow_the_energy_across_a_range_where_one_map_drifts():
    from models.calogan.cell_maps import _single_map, apply_cell_map, fit_cell_maps

    threshold = HIT_THRESHOLD_GEV * CELL_SCALE
    rng = np.random.default_rng(0)

    def cells(
        energies,
    ):  # a halo and a core cell growing with the energy; INT8's noise fixed by the range's scales
        z = latents(energies, seed=int(rng.integers(1 << 31)))
        fp32 = (
            rng.normal([-threshold, 30 * threshold], [1.5 * threshold, 5 * threshold], (len(z), 2))
            * (energies / 250)[:, None]
        )
        return z, fp32 + rng.normal(0, 5 * threshold, fp32.shape), np.maximum(fp32, 0)

    z, int8, fp32 = cells(np.exp(rng.uniform(np.log(188), np.log(307), 4096)))
    maps = fit_cell_maps(int8[:, None, :], fp32, z, threshold)
    assert maps.cell_shape == (1, 2)
    one_map = _single_map(int8, fp32, threshold, steps=24)
    for low, high in ((188, 198), (297, 307)):  # the range's ends, unseen showers
        z, int8, fp32 = cells(rng.uniform(low, high, 20000))
        error = {
            name: np.abs(out.mean(axis=0) / fp32.mean(axis=0) - 1)
            for name, out in (
                ("one map", apply_cell_map(int8, *one_map)),
                ("blended", maps.apply(int8, z)),
            )
        }
        assert error["one map"][0] > 0.1 and error["blended"][0] < 0.5 * error["one map"][0], (
            error
        )  # the halo's rectified noise drifts
        assert error["blended"][1] < 0.01, error  # the core has no drift: the blend keeps its mean


def test_generated_showers_stream_into_a_comparison_as_their_file_would(tmp_path):
    from models.calogan.evaluate import bin_energies
    from models.calogan.generate import GeneratedShowers
    from physics_metrics import compare, open_showers
    from physics_metrics.showerfile import write_shower_file

    keras.utils.set_random_seed(0)
    fp32 = onnx_source(keras_to_onnx(generator()))
    energies = bin_energies(10, seed=0)
    z = latents(energies, seed=1)
    sources = {"fp32": fp32, "brighter": lambda z, e: 1.02 * fp32(z, e)}
    files = {
        name: open_showers(
            write_shower_file(tmp_path / f"{name}.h5", source(z, energies), energies)
        )
        for name, source in sources.items()
    }
    streamed = compare(*(GeneratedShowers(source, z, energies) for source in sources.values()))
    stored = compare(*files.values(), chunk=7)
    assert len(streamed.bins) == 7 and all(row["showers_generated"] == 10 for row in streamed.bins)
    assert streamed.max_separation == pytest.approx(stored.max_separation, rel=1e-4, abs=1e-9)
    assert [row["sampling_fraction_shift"] for row in streamed.bins] == pytest.approx(
        [0.02] * 7, abs=1e-5
    )


def test_a_generator_made_for_openvino_has_its_cells_corrected_as_openvino_computes_them(tmp_path):
    from models.calogan.generate import energy_edges, quantize_by_energy, range_latents

    keras.utils.set_random_seed(0)
    fp32 = keras_to_onnx(generator())
    onnx.save(fp32, tmp_path / "g.onnx")
    edges = energy_edges(1, 50.0, 100.0)
    model = quantize_by_energy(tmp_path / "g.onnx", edges, samples=128, runtime="openvino").models[
        0
    ]
    assert Recipe.from_model(model).runtime == "openvino"
    z = range_latents(edges, 0, 128)  # the latents its cell maps were fitted on
    showers = onnx_source(model)(z, None)  # in the runtime its recipe names
    np.testing.assert_array_equal(showers, onnx_source(model, runtime="openvino")(z, None))
    assert showers.sum() == pytest.approx(onnx_source(fp32)(z, None).sum(), rel=1e-3)
