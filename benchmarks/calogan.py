"""`python -m benchmarks.calogan`: the 3DGAN generator, FP32 vs INT8 (ours, ORT quantize_static,
TFLite), batch 64, 2 threads: speed, and the physics of every INT8 generator against FP32.

The generator's weights are the cached training (`python -m models.calogan train`) when there
is one, else seeded random weights; the JSON says which. Every model gets the same latents
(noise x Ep/100, Ep uniform in 10-500 GeV), so INT8-vs-FP32 differences are quantization
alone; `physics_metrics.compare` measures them per energy bin. FP32 is ONNX Runtime on the
model as exported; every INT8 model uses the same 512 calibration latents.
"""

import json
import tempfile
from pathlib import Path

import h5py
import numpy as np

from benchmarks.results import write_results
from benchmarks.rivals import TFLiteRunner, ort_quantize_static, tflite_full_int8
from physics_metrics import compare, open_showers
from quantize import QuantConfig, quantize_
from quantize.bench import compare as compare_speed
from quantize.cache import cache_dir
from quantize.coverage import kernel_counts, optimized_graph
from quantize.frontend.tensorflow import keras_to_onnx
from quantize.runtime import cpu_isa, run_batches, session

BATCH, THREADS = 64, 2
SHOWERS = 47 * BATCH  # whole batches: the TFLite interpreter is sized for one batch shape
ENERGY_BINS = (50, 100, 200, 300, 400)
NAMES = {"fp32": "ORT FP32 (as exported)", "int8": "quantize INT8", "ort_quantize_static": "ORT quantize_static INT8", "tflite_int8": "TFLite full-int8"}


def _generator():
    import keras

    from models.calogan.network import generator

    keras.utils.set_random_seed(0)
    model = generator()
    trained = cache_dir("calogan") / "generator.weights.h5"
    if trained.exists():
        model.load_weights(trained)
        epochs = json.loads((trained.parent / "state.json").read_text())["epoch"]
        return model, f"trained, {epochs} epochs"
    return model, "random (keras seed 0)"


def _latents(count: int, seed: int):
    from models.calogan.network import LATENT

    rng = np.random.default_rng(seed)
    energies = rng.uniform(10, 500, count)
    return (rng.normal(size=(count, LATENT)) * (energies / 100)[:, None]).astype(np.float32), energies


def _write(path: Path, cells_x100: np.ndarray, energies: np.ndarray) -> Path:
    with h5py.File(path, "w") as f:
        f["ECAL"] = cells_x100[..., 0] / 100  # back to GeV
        f["energy"] = energies
    return path


def main() -> None:
    model, weights = _generator()
    fp32 = keras_to_onnx(model)
    calib, _ = _latents(512, seed=1)
    latents, energies = _latents(SHOWERS, seed=2)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        np.save(tmp / "latents.npy", calib)
        (tmp / "generator.onnx").write_bytes(fp32.SerializeToString())
        # The output layer stays FP32: uint8 cannot hold cell energies spanning six decades, and
        # this 2x2x2 convolution is 0.3 % of the generator's multiply-adds.
        output_conv = [n.name for n in fp32.graph.node if n.op_type == "Conv"][-1]
        ours = quantize_(tmp / "generator.onnx", tmp / "latents.npy", QuantConfig(threads=THREADS, exclude=(output_conv,)))
        ort_static = ort_quantize_static(fp32, {"latent": calib})
        tflite = tflite_full_int8(model, calib)
        onnx_models = {"fp32": fp32, "int8": ours.model, "ort_quantize_static": ort_static}
        runner = TFLiteRunner(tflite, (BATCH, latents.shape[1]), THREADS)
        showers = {name: run_batches(session(m, THREADS), {"latent": latents}, BATCH)[0] for name, m in onnx_models.items()}
        showers["tflite_int8"] = np.concatenate([runner.run(latents[i:i + BATCH]) for i in range(0, SHOWERS, BATCH)])
        files = {name: _write(tmp / f"{name}.h5", s, energies) for name, s in showers.items()}
        physics = {name: compare(open_showers(files["fp32"]), open_showers(files[name]), ENERGY_BINS, half_width=25.0).to_dict()
                   for name in ("int8", "ort_quantize_static", "tflite_int8")}

        feeds = {"latent": latents[:BATCH]}
        sessions = {name: session(m, THREADS) for name, m in onnx_models.items()}
        calls = {name: (lambda s=s: s.run(None, feeds)) for name, s in sessions.items()}
        calls["tflite_int8"] = lambda: runner.run(latents[:BATCH])
        speed = compare_speed(calls, BATCH, min_seconds=8.0)

    def worst(name):
        return max(physics[name]["max_separation"].values())

    def sf_shift(name):
        return max(abs(b["sampling_fraction_shift"]) for b in physics[name]["bins"])

    result = {
        "machine": cpu_isa(), "threads": THREADS, "batch": BATCH, "weights": weights, "showers_compared": SHOWERS,
        **{f"{name}_throughput": s["throughput"] for name, s in speed.items()},
        "int8_over_fp32": speed["int8"]["throughput"] / speed["fp32"]["throughput"],
        "max_separation_power_int8_vs_fp32": worst("int8"),
        "max_separation_power_ort_quantize_static_vs_fp32": worst("ort_quantize_static"),
        "max_separation_power_tflite_vs_fp32": worst("tflite_int8"),
        "max_sampling_fraction_shift_vs_fp32": {name: sf_shift(name) for name in physics},
        "physics_vs_fp32": {name: {"max_separation": p["max_separation"], "combined_3dgan": p["combined_3dgan"]} for name, p in physics.items()},
        "speed": speed,
        "ort_kernels": {"int8": ours.kernels, "ort_quantize_static": kernel_counts(optimized_graph(ort_static))},
    }
    lines = [f"# 3DGAN generator ({weights} weights): {result['machine']['cpu']}, {THREADS} threads, batch {BATCH}", "",
             "| model | showers/s | x FP32 | max separation vs FP32 | max SF shift vs FP32 |", "|---|---|---|---|---|"]
    for key, label in NAMES.items():
        s = speed[key]["throughput"]
        physics_cells = "- | -" if key == "fp32" else f"{worst(key):.4f} | {100 * sf_shift(key):.2f} %"
        lines.append(f"| {label} | {s:.1f} | {s / speed['fp32']['throughput']:.2f} | {physics_cells} |")
    lines += ["", f"Separation powers over {len(ENERGY_BINS)} energy bins of +-25 GeV, {SHOWERS} paired showers; "
              "with random weights they measure quantization fidelity, not physics.", ""]
    markdown = "\n".join(lines)
    write_results("calogan", result, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
