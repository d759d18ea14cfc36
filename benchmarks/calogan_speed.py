"""`python -m benchmarks.calogan_speed`: the 3DGAN generator, FP32 vs INT8, batch 64, 2 threads.

Speed only, with seeded random weights (as REFERENCE section 7 measured): the physics of the
INT8 generator needs trained weights and is issue 3's `benchmarks/calogan.py`. FP32 is ONNX
Runtime on the model as exported; every INT8 model uses the same 512 calibration latents.
"""

import tempfile
from pathlib import Path

import numpy as np

from benchmarks.results import write_results
from benchmarks.rivals import TFLiteRunner, ort_quantize_static, tflite_full_int8
from quantize import QuantConfig, quantize_
from quantize.bench import compare
from quantize.coverage import kernel_counts, optimized_graph
from quantize.frontend.tensorflow import keras_to_onnx
from quantize.runtime import cpu_isa, session

BATCH, THREADS = 64, 2


def main() -> None:
    import keras

    from models.calogan.network import LATENT, generator

    keras.utils.set_random_seed(0)
    model = generator()
    fp32 = keras_to_onnx(model)
    rng = np.random.default_rng(0)
    latents = (rng.normal(size=(576, LATENT)) * rng.uniform(0.1, 5.0, (576, 1))).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "latents.npy", latents)
        onnx_path = Path(tmp) / "generator.onnx"
        onnx_path.write_bytes(fp32.SerializeToString())
        ours = quantize_(onnx_path, Path(tmp) / "latents.npy", QuantConfig(calib_samples=512, threads=THREADS))
    ort_static = ort_quantize_static(fp32, {"latent": latents[:512]})
    tflite = tflite_full_int8(model, latents[:512])

    feeds = {"latent": latents[:BATCH]}
    sessions = {"fp32": session(fp32, THREADS), "int8": session(ours.model, THREADS), "ort_quantize_static": session(ort_static, THREADS)}
    calls = {name: (lambda s=s: s.run(None, feeds)) for name, s in sessions.items()}
    runner = TFLiteRunner(tflite, (BATCH, LATENT), THREADS)
    calls["tflite_int8"] = lambda: runner.run(latents[:BATCH])
    speed = compare(calls, BATCH, min_seconds=8.0)
    result = {
        "machine": cpu_isa(), "threads": THREADS, "batch": BATCH, "weights": "random (keras seed 0)",
        **{f"{name}_throughput": s["throughput"] for name, s in speed.items()},
        "int8_over_fp32": speed["int8"]["throughput"] / speed["fp32"]["throughput"],
        "output_sqnr_db_int8": ours.output_sqnr_db,
        "speed": speed,
        "ort_kernels": {"int8": ours.kernels, "ort_quantize_static": kernel_counts(optimized_graph(ort_static))},
    }
    names = {"fp32": "ORT FP32 (as exported)", "int8": "quantize INT8 (Conv3D folded to 2D)", "ort_quantize_static": "ORT quantize_static INT8",
             "tflite_int8": "TFLite full-int8"}
    lines = [f"# 3DGAN generator: {result['machine']['cpu']}, {THREADS} threads, batch {BATCH}, random weights", "",
             "| model | showers/s | x FP32 |", "|---|---|---|"]
    lines += [f"| {label} | {speed[k]['throughput']:.1f} | {speed[k]['throughput'] / speed['fp32']['throughput']:.2f} |" for k, label in names.items()]
    markdown = "\n".join(lines) + "\n"
    write_results("calogan_speed", result, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
