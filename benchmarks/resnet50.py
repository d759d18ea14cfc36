"""`python -m benchmarks.resnet50`: ResNet-50 FP32 (as exported, and after quantize's clean-up:
the baseline) vs this toolkit's INT8 vs ONNX Runtime's quantize_static, AMD Quark, TensorFlow
Lite full-integer and OpenVINO (FP32, NNCF INT8, and our INT8 model made for OpenVINO), in one run
on this machine. Writes benchmarks/results/resnet50_TARGET.json and .md, one pair per CPU target
(avx2, vnni, amx): the comparison differs by INT8 path.

Accuracy: top-1 on the 10k Fashion-MNIST test images at the training resolution (32x32).
Speed: batch 1 and 32 at 32x32, the resolution the model serves, and batch 32 at 224x224 (the
same weights at ImageNet's cost: convolutions do not care about resolution); 2 threads, medians
over rounds that interleave the models. Every INT8 model uses the same 1000 calibration images.
Ours times each Conv's kernels at the shapes it will serve (kernel timing; on AMX also which Convs
run faster on the tiles), so ours is made twice: calibrated at 32x32, and on the same images
upscaled to 224x224, told it will be served at batch 32 there (`--serve-batch 32`).
`--model demo` runs it on the model `make demo` trains, where the reference one would take hours
to train (a 2-core AVX2-only CPU): the files say which.
Kernel timing measures ONNX Runtime's kernels, so the model made for OpenVINO
(`Recipe(runtime="openvino")`, calibrated at 32x32) keeps no Conv FP32 on its account.
"""

import argparse
import time

import numpy as np
import onnx

from benchmarks.results import for_this_cpu, sized, write_results
from benchmarks.rivals import (
    TFLiteRunner,
    nncf_int8,
    ort_quantize_static,
    quark_int8,
    require_quark,
    tflite_full_int8,
)
from calibration import METHODS
from models.resnet50.build import DEMO, TRAINED, add_model_option, build, test_images, trained_as
from quantize import Recipe, RunOptions, quantize
from quantize.bench import compare
from quantize.coverage import kernel_counts, optimized_graph
from quantize.kernel_timing import SLOWER
from quantize.report import amx_tile_convs
from quantize.runtime import OpenVINOSession, session
from quantize.target import host_isa

THREADS = 2
LARGE, LARGE_BATCH = 224, 32
SPEEDS = ((32, 1), (32, 32), (LARGE, LARGE_BATCH))  # (image size, batch)
LABELS = {
    "fp32": "FP32 as exported (ORT)",
    "fp32_clean": "FP32 after clean-up (ORT, the baseline)",
    "int8": "quantize INT8 (ORT), calibrated at 32x32",
    "int8_224": "quantize INT8 (ORT), calibrated at 224x224",
    "ort_quantize_static": "ORT quantize_static INT8",
    "quark_int8": "AMD Quark INT8 (ORT)",
    "tflite_int8": "TFLite full-integer",
    "openvino_fp32": "OpenVINO FP32",
    "nncf_int8": "NNCF INT8 (OpenVINO)",
    "int8_openvino": "quantize INT8 made for OpenVINO",
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.resnet50")
    parser.add_argument(
        "--seconds",
        type=float,
        default=sized(6.0, 0.3),
        help="minimum timing per model and speed setting",
    )
    add_model_option(parser)
    args = parser.parse_args()
    require_quark()
    cache = build(sized(TRAINED[args.model], DEMO))
    fp32 = onnx.load(str(cache / "resnet50.onnx"))
    calib = np.load(cache / "calib.npz")["image"]
    images, labels = test_images(sized(None, 500))

    start = time.perf_counter()
    ours = quantize(
        cache / "resnet50.onnx", cache / "calib.npz", Recipe(), RunOptions(threads=THREADS)
    )
    ours_seconds = time.perf_counter() - start
    ours_openvino = quantize(
        cache / "resnet50.onnx",
        cache / "calib.npz",
        Recipe(runtime="openvino"),
        RunOptions(threads=THREADS),
    )
    upscale = LARGE // calib.shape[1]
    ours_224 = quantize(
        cache / "resnet50.onnx",
        [
            {"image": calib[i : i + 8].repeat(upscale, 1).repeat(upscale, 2)}
            for i in range(0, 320, 8)
        ],
        Recipe(),
        RunOptions(threads=THREADS, batch_size=8, calib_samples=256, serve_batch=LARGE_BATCH),
    )
    import keras

    onnx_models = {
        "fp32": fp32,
        "fp32_clean": ours.fp32_model,
        "int8": ours.model,
        "int8_224": ours_224.model,
        "ort_quantize_static": ort_quantize_static(fp32, {"image": calib}),
        "quark_int8": quark_int8(cache / "resnet50.onnx", calib, "image"),
    }
    runners = {name: _onnx_runner(model) for name, model in onnx_models.items()}
    tflite = tflite_full_int8(
        keras.saving.load_model(cache / "resnet50.keras", compile=False), calib
    )
    runners["tflite_int8"] = lambda shape: TFLiteRunner(tflite, shape, THREADS).run
    for name, ov_model in (
        ("openvino_fp32", fp32),
        ("nncf_int8", nncf_int8(cache / "resnet50.onnx", calib)),
        ("int8_openvino", ours_openvino.model),
    ):
        runners[name] = lambda shape, m=ov_model: _first_output(
            OpenVINOSession(m, THREADS, {"image": shape})
        )

    accuracy = {name: 100 * _top1(make, images, labels) for name, make in runners.items()}
    by_method = {
        m: 100
        * _top1(
            _onnx_runner(
                quantize(
                    cache / "resnet50.onnx",
                    cache / "calib.npz",
                    Recipe(ranges=METHODS[m]()),
                    RunOptions(threads=THREADS),
                ).model
            ),
            images,
            labels,
        )
        for m in METHODS
    }
    speed = {}
    for size, batch in SPEEDS:
        x = np.random.default_rng(0).normal(size=(batch, size, size, 3)).astype(np.float32)
        compiled = {name: make(x.shape) for name, make in runners.items()}
        calls = {name: (lambda run=run, x=x: run(x)) for name, run in compiled.items()}
        timed = compare(calls, batch, args.seconds)
        speed.update({_key(name, size, batch): stats for name, stats in timed.items()})

    result = {
        "machine": host_isa(),
        "threads": THREADS,
        "training": trained_as(fp32),
        "accuracy_input": "32x32x3, 10000 Fashion-MNIST test images",
        "calibration": {
            "samples": ours.calibration_samples,
            "method": ours.recipe.ranges.name,
            "collect_seconds": ours.calibration_seconds,
            "quantize_total_seconds": ours_seconds,
        },
        "rows": {
            name: {
                "label": LABELS[name],
                "top1": accuracy[name],
                **{
                    f"throughput_{size}_b{batch}": speed[_key(name, size, batch)]["throughput"]
                    for size, batch in SPEEDS
                },
            }
            for name in runners
        },
        "baseline": "fp32_clean",
        "top1_drop_pp": accuracy["fp32_clean"] - accuracy["int8"],
        "top1_int8_by_method": by_method,
        "speed": speed,
        "ort_kernels": {
            name: kernel_counts(optimized_graph(onnx_models[name]))
            for name in ("int8", "int8_224", "ort_quantize_static")
        },
        "fp32_nodes_by_kernel_timing": {
            name: sum(d.reason.startswith(SLOWER) for d in result.decisions)
            for name, result in (("int8", ours), ("int8_224", ours_224))
        },
        "amx_tile_convs": {
            name: amx_tile_convs(result)
            for name, result in (("int8", ours), ("int8_224", ours_224))
        },
        "whole_model_timing_check": {
            name: result.timing_check or "none: kernel timing kept no node FP32"
            for name, result in (("int8", ours), ("int8_224", ours_224))
        },
        "tflite_path": "ai-edge-litert interpreter, default XNNPACK delegate",
        "openvino_config": "static shape, one synchronous request, 2 threads, "
        "INFERENCE_PRECISION_HINT f32; NNCF quantize defaults (performance preset, fast bias "
        "correction), 1000 calibration images",
    }
    path = write_results(for_this_cpu("resnet50"), result, _markdown(result))
    print(_markdown(result))
    print(f"wrote {path}")


def _onnx_runner(model):
    return lambda shape: _first_output(session(model, THREADS))


def _first_output(runner):
    """`x -> logits` of a session with ONNX Runtime's `run`."""
    return lambda x: runner.run(None, {"image": x})[0]


def _top1(make_runner, images: np.ndarray, labels: np.ndarray, batch: int = 250) -> float:
    run = make_runner((batch, *images.shape[1:]))
    logits = np.concatenate([run(images[i : i + batch]) for i in range(0, len(images), batch)])
    return float(np.mean(logits.argmax(axis=1) == labels))


def _key(name: str, size: int, batch: int) -> str:
    return f"{name}@{size}x{size}_batch{batch}"


def _markdown(result: dict) -> str:
    rows = result["rows"]
    base = rows[result["baseline"]]
    machine = result["machine"]
    columns = [f"throughput_{size}_b{batch}" for size, batch in SPEEDS]
    lines = [
        f"# ResNet-50: {machine['cpu']}, {result['threads']} threads, INT8 path "
        f"{machine['int8_gemm_path']}, ORT {machine['onnxruntime']}",
        "",
        f"Trained: {result['training']}.",
        "",
        "| model | top-1 % (32x32) | img/s 32x32 b1 | img/s 32x32 b32 | x baseline | "
        f"img/s {LARGE}x{LARGE} b32 | x baseline |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows.values():
        s1, s32, large = (row[c] for c in columns)
        lines.append(
            f"| {row['label']} | {row['top1']:.2f} | {s1:.1f} | {s32:.1f} | "
            f"{s32 / base[columns[1]]:.2f} | {large:.1f} | {large / base[columns[2]]:.2f} |"
        )
    timing = result["fp32_nodes_by_kernel_timing"]
    check = result["whole_model_timing_check"]
    lines += [
        "",
        f"Top-1 drop of ours: {result['top1_drop_pp']:.2f} pp. INT8 top-1 by calibration method: "
        + ", ".join(f"{m} {v:.2f}" for m, v in result["top1_int8_by_method"].items())
        + ".",
        f"Convs kept FP32 by kernel timing: {timing['int8']} calibrated at 32x32, "
        f"{timing['int8_224']} at {LARGE}x{LARGE}. The whole-model check of those it kept, "
        f"at 32x32: {check['int8']}; at {LARGE}x{LARGE}: {check['int8_224']}.",
        *_tiles_line(result),
        f"OpenVINO: {result['openvino_config']}.",
        f"Calibration: {result['calibration']['samples']} samples, "
        f"{result['calibration']['collect_seconds']:.1f} s collecting, "
        f"{result['calibration']['quantize_total_seconds']:.1f} s for the whole quantize call.",
        "",
    ]
    return "\n".join(lines)


def _tiles_line(result: dict) -> list[str]:
    tiles = result["amx_tile_convs"]
    if not any(tiles.values()):
        return []
    return [
        f"Convs run on AMX tiles (kernel timing's choice): {tiles['int8']} calibrated at 32x32, "
        f"{tiles['int8_224']} at {LARGE}x{LARGE} (timed at batch {LARGE_BATCH})."
    ]


if __name__ == "__main__":
    main()
