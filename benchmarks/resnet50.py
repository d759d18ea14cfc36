"""`python -m benchmarks.resnet50`: ResNet-50 FP32 (as exported, and after quantize's clean-up:
the baseline) vs this toolkit's INT8 vs ONNX Runtime's quantize_static vs TensorFlow Lite
full-integer, in one run on this machine. Writes benchmarks/results/resnet50_TARGET.json and .md,
one pair per CPU target (avx2, vnni, amx): the comparison differs by INT8 path.

Accuracy: top-1 on the 10k Fashion-MNIST test images at the training resolution (32x32).
Speed: the same weights at 224x224 (convolutions do not care about resolution), batch 1 and
32, 2 threads, medians over rounds that interleave the four models. All INT8 models use the
same 1000 calibration images.
"""

import argparse
import time

import numpy as np
import onnx

from benchmarks.results import write_results
from benchmarks.rivals import TFLiteRunner, ort_quantize_static, tflite_full_int8
from calibration import METHODS
from models.resnet50.build import build
from models.resnet50.evaluate import top1
from quantize import Recipe, RunOptions, quantize
from quantize.bench import compare
from quantize.coverage import kernel_counts, optimized_graph
from quantize.runtime import session
from quantize.target import host_isa, host_target

THREADS = 2
SPEED_SIZE = 224


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.resnet50")
    parser.add_argument(
        "--seconds", type=float, default=8.0, help="minimum timing per model and batch size"
    )
    args = parser.parse_args()
    cache = build()
    fp32 = onnx.load(str(cache / "resnet50.onnx"))
    calib = np.load(cache / "calib.npz")["image"]
    with np.load(cache / "test.npz") as test:
        images, labels = test["image"], test["label"]

    start = time.perf_counter()
    ours = quantize(
        cache / "resnet50.onnx", cache / "calib.npz", Recipe(), RunOptions(threads=THREADS)
    )
    ours_seconds = time.perf_counter() - start
    ort_static = ort_quantize_static(fp32, {"image": calib})
    import keras

    tflite = tflite_full_int8(
        keras.saving.load_model(cache / "resnet50.keras", compile=False), calib
    )

    onnx_models = {
        "fp32": fp32,
        "fp32_clean": ours.fp32_model,
        "int8": ours.model,
        "ort_quantize_static": ort_static,
    }
    accuracy = {name: 100 * top1(m, images, labels, THREADS) for name, m in onnx_models.items()}
    accuracy["tflite_int8"] = 100 * _tflite_top1(tflite, images, labels)
    by_method = {
        m: 100
        * top1(
            quantize(
                cache / "resnet50.onnx",
                cache / "calib.npz",
                Recipe(ranges=METHODS[m]()),
                RunOptions(threads=THREADS),
            ).model,
            images,
            labels,
            THREADS,
        )
        for m in METHODS
    }

    speed = {}
    for batch in (1, 32):
        x = (
            np.random.default_rng(0)
            .normal(size=(batch, SPEED_SIZE, SPEED_SIZE, 3))
            .astype(np.float32)
        )
        sessions = {name: session(model, THREADS) for name, model in onnx_models.items()}
        calls = {name: (lambda s=s, x=x: s.run(None, {"image": x})) for name, s in sessions.items()}
        runner = TFLiteRunner(tflite, x.shape, THREADS)
        calls["tflite_int8"] = lambda runner=runner, x=x: runner.run(x)
        speed.update(
            {(name, batch): stats for name, stats in compare(calls, batch, args.seconds).items()}
        )

    result = {
        "machine": host_isa(),
        "threads": THREADS,
        "speed_input": f"{SPEED_SIZE}x{SPEED_SIZE}x3",
        "accuracy_input": "32x32x3, 10000 Fashion-MNIST test images",
        "calibration": {
            "samples": ours.calibration_samples,
            "method": ours.recipe.ranges.name,
            "collect_seconds": ours.calibration_seconds,
            "quantize_total_seconds": ours_seconds,
        },
        **{
            f"{name}_throughput": speed[(name, 32)]["throughput"]
            for name in ("fp32", "fp32_clean", "int8", "ort_quantize_static", "tflite_int8")
        },
        "top1_fp32": accuracy["fp32"],
        "top1_fp32_clean": accuracy["fp32_clean"],
        "top1_int8": accuracy["int8"],
        "top1_drop_pp": accuracy["fp32"] - accuracy["int8"],
        "top1_ort_quantize_static": accuracy["ort_quantize_static"],
        "top1_tflite_int8": accuracy["tflite_int8"],
        "top1_int8_by_method": by_method,
        "speed": {f"{name}@batch{batch}": m for (name, batch), m in speed.items()},
        "ort_kernels": {
            "int8": kernel_counts(optimized_graph(ours.model)),
            "ort_quantize_static": kernel_counts(optimized_graph(ort_static)),
        },
        "tflite_path": "ai-edge-litert interpreter, default XNNPACK delegate",
    }
    path = write_results(f"resnet50_{host_target()}", result, _markdown(result, speed, accuracy))
    print(_markdown(result, speed, accuracy))
    print(f"wrote {path}")


def _tflite_top1(
    flatbuffer: bytes, images: np.ndarray, labels: np.ndarray, batch: int = 250
) -> float:
    runner = TFLiteRunner(flatbuffer, (batch, *images.shape[1:]), THREADS)
    logits = np.concatenate(
        [runner.run(images[i : i + batch]) for i in range(0, len(images), batch)]
    )
    return float(np.mean(logits.argmax(axis=1) == labels))


def _markdown(result: dict, speed: dict, accuracy: dict) -> str:
    names = {
        "fp32": "FP32 as exported",
        "fp32_clean": "FP32 after clean-up (baseline)",
        "int8": "quantize INT8 (ours)",
        "ort_quantize_static": "ORT quantize_static INT8",
        "tflite_int8": "TFLite full-int8",
    }
    base = {b: speed[("fp32_clean", b)]["throughput"] for b in (1, 32)}
    lines = [
        f"# ResNet-50: {result['machine']['cpu']}, {result['threads']} threads, INT8 path {result['machine']['int8_gemm_path']}, ORT {result['machine']['onnxruntime']}",
        "",
        "| model | top-1 % (32x32) | img/s batch 1 | img/s batch 32 | x FP32 clean-up (b32) | p50 ms (b32) |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in names.items():
        s1, s32 = speed[(key, 1)], speed[(key, 32)]
        lines.append(
            f"| {label} | {accuracy[key]:.2f} | {s1['throughput']:.1f} | {s32['throughput']:.1f} | {s32['throughput'] / base[32]:.2f} | {s32['latency_ms_p50']:.0f} |"
        )
    lines += [
        "",
        f"Top-1 drop of ours: {result['top1_drop_pp']:.2f} pp. INT8 top-1 by calibration method: "
        + ", ".join(f"{m} {v:.2f}" for m, v in result["top1_int8_by_method"].items())
        + ".",
        f"Ours vs ORT quantize_static at batch 32: {result['int8_throughput'] / result['ort_quantize_static_throughput']:.2f}x; "
        f"vs TFLite: {result['int8_throughput'] / result['tflite_int8_throughput']:.2f}x.",
        f"Calibration: {result['calibration']['samples']} samples, {result['calibration']['collect_seconds']:.1f} s collecting, "
        f"{result['calibration']['quantize_total_seconds']:.1f} s for the whole quantize call.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
