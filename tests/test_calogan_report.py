"""The 3DGAN's validation report through the core: `--evaluate calogan` adds the physics of the
FP32 and INT8 generators against simulated showers, with plots, and extra generators beside them."""

import json

import numpy as np
import onnx
import pytest

keras = pytest.importorskip("keras")
pytest.importorskip("matplotlib")

from models.calogan.evaluate import PhysicsEvaluator  # noqa: E402
from models.calogan.generate import int8_config, latents, onnx_source  # noqa: E402
from models.calogan.network import generator  # noqa: E402
from quantize import quantize_, report  # noqa: E402
from quantize.frontend.tensorflow import keras_to_onnx  # noqa: E402


def test_report_has_the_physics_section_with_a_rival_beside_ours(tmp_path):
    keras.utils.set_random_seed(0)
    fp32 = keras_to_onnx(generator())
    onnx.save(fp32, tmp_path / "g.onnx")
    np.save(tmp_path / "latents.npy", latents(np.random.default_rng(0).uniform(10, 500, 96), seed=1))
    result = quantize_(tmp_path / "g.onnx", tmp_path / "latents.npy", int8_config(fp32, calib_samples=64))
    halved = onnx_source(fp32)
    evaluator = PhysicsEvaluator(per_bin=12, extra={"half FP32": lambda z, e: 0.5 * halved(z, e)})
    summary = report.evaluate(report.summarize(result), result, evaluator, seconds=0.2)
    json_path = report.write(summary, tmp_path / "report.html")

    physics = json.loads(json_path.read_text())["sections"][0]["data"]
    assert set(physics["vs_reference"]) == {"FP32", "INT8 (quantize)", "half FP32"}
    assert summary["metric"]["fp32"] == pytest.approx(physics["vs_reference"]["FP32"]["combined_3dgan"])
    shifts = [row["sampling_fraction_shift"] for row in physics["vs_baseline"]["half FP32"]["bins"]]
    np.testing.assert_allclose(shifts, -0.5, atol=1e-4)  # the extra generator saw the same latents
    page = (tmp_path / "report.html").read_text()
    assert "Physics: 84 showers in 7 energy bins" in page and page.count("data:image/png;base64,") == 5
    assert "data:image/png" not in json_path.read_text()


def test_energy_range_models_route_each_shower_to_the_model_of_its_range(tmp_path):
    from models.calogan.generate import energy_edges, quantize_by_energy

    keras.utils.set_random_seed(0)
    onnx.save(keras_to_onnx(generator()), tmp_path / "g.onnx")
    ranges = quantize_by_energy(tmp_path / "g.onnx", energy_edges(2, 2.0, 200.0), samples=64)
    assert ranges.edges.tolist() == pytest.approx([2.0, 20.0, 200.0])
    np.testing.assert_array_equal(ranges.model_index(np.array([1.0, 5.0, 19.5, 20.5, 150.0, 900.0])), [0, 0, 0, 1, 1, 1])
    scales = [{i.name: onnx.numpy_helper.to_array(i).tolist() for i in m.graph.initializer if i.name.endswith("_scale")} for m in ranges.models]
    assert scales[0] != scales[1]  # each range calibrated on its own energies
    energies = np.array([5.0, 150.0, 6.0, 120.0])
    z = latents(energies, seed=3)
    mixed = ranges.source()(z, energies)
    np.testing.assert_array_equal(mixed[[0, 2]], onnx_source(ranges.models[0])(z[[0, 2]], energies[[0, 2]]))
    np.testing.assert_array_equal(mixed[[1, 3]], onnx_source(ranges.models[1])(z[[1, 3]], energies[[1, 3]]))


def test_output_bias_correction_restores_the_mean_energy_of_fp32(tmp_path):
    from models.calogan.generate import correct_output_bias

    keras.utils.set_random_seed(0)
    fp32 = keras_to_onnx(generator())
    onnx.save(fp32, tmp_path / "g.onnx")
    z = latents(np.random.default_rng(0).uniform(50, 100, 128), seed=1)
    config = int8_config(fp32)
    int8 = quantize_(tmp_path / "g.onnx", [{"latent": z[:64]}, {"latent": z[64:]}], config).model
    corrected = correct_output_bias(fp32, int8, config.exclude[0], z)

    def energy(model):
        return onnx_source(model)(z, None).sum()

    target, before, after = energy(fp32), energy(int8), energy(corrected)
    assert before > target * 1.001  # rectified rounding noise adds energy
    assert abs(after / target - 1) < 0.1 * abs(before / target - 1)
    bias = next(i for i in corrected.graph.initializer if i.name.endswith("_bias_correction"))
    assert onnx.numpy_helper.to_array(bias)[0] < 0
