"""`python -m benchmarks.targets`: ResNet-50 INT8 made for each target, run on this CPU and on an
emulated AVX2 CPU, against the FP32 graph INT8 starts from.

Rows: FP32 as exported; FP32 after quantize's clean-up (the baseline); INT8 for avx2 (paired
weights) without and with kernel timing (the CLI default); INT8 for vnni/amx (full-range
weights, the same model for both) run with ORT's default kernels and with its exact U8U8 kernels
(`session.x64quantprecision`, what quantize's runtime does when a full-range model meets a
saturating CPU). Top-1 on the 10k Fashion-MNIST test images, throughput at batch 32 at the
32x32 training resolution, 2 threads, interleaved rounds. Under emulation
(../shared/tools/as-cpu avx2, qemu: MLAS takes its AVX2 kernels whatever the host) top-1 on a
subset, for accuracy only: emulated speed means nothing.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx

from benchmarks.results import sized, write_results
from models.resnet50.build import DEMO, TRAINED, add_model_option, build, test_images, trained_as
from quantize import Recipe, RunOptions, quantize
from quantize.bench import compare
from quantize.runtime import TargetMismatchWarning, run_batches, session
from quantize.target import host_target

THREADS = 2
BATCH = 32
AS_CPU = Path(__file__).resolve().parents[2] / "shared" / "tools" / "as-cpu"
LABELS = {
    "fp32_exported": "FP32 as exported",
    "fp32_clean": "FP32 after clean-up (baseline)",
    "avx2": "INT8 for avx2 (paired weights)",
    "avx2_timed": "INT8 for avx2 + kernel timing (CLI default here)",
    "vnni": "INT8 for vnni/amx (weights +-127), ORT default kernels",
    "vnni_u8u8": "INT8 for vnni/amx, ORT exact U8U8 kernels",
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.targets")
    parser.add_argument(
        "--seconds", type=float, default=sized(6.0, 0.3), help="minimum timing per model"
    )
    parser.add_argument(
        "--emulated-images",
        type=int,
        default=sized(500, 50),
        help="test images top-1 is read on under AVX2 emulation",
    )
    add_model_option(parser)
    args = parser.parse_args()
    cache = build(sized(TRAINED[args.model], DEMO))
    images, labels = test_images(sized(None, 500))
    models, kernel_timing = _models(cache)
    runs = {name: (model, None) for name, model in models.items()}
    runs["vnni"], runs["vnni_u8u8"] = (models["vnni"], False), (models["vnni"], True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TargetMismatchWarning)  # the point of the vnni rows
        sessions = {
            name: session(model, THREADS, exact_kernels=exact)
            for name, (model, exact) in runs.items()
        }
    top1 = {name: _top1(s, images, labels) for name, s in sessions.items()}
    x = images[:BATCH]
    speed = compare(
        {
            name: (lambda s=s: s.run(None, {s.get_inputs()[0].name: x}))
            for name, s in sessions.items()
        },
        BATCH,
        args.seconds,
    )
    emulated = _emulated_top1(
        {name: models[name] for name in ("fp32_clean", "avx2", "vnni")},
        images,
        labels,
        args.emulated_images,
    )

    base = speed["fp32_clean"]["throughput"]
    result = {
        "model": f"ResNet-50 on Fashion-MNIST, {trained_as(models['fp32_exported'])}, 32x32x3",
        "threads": THREADS,
        "batch": BATCH,
        "test_images": len(labels),
        "rows": {
            name: {
                "label": LABELS[name],
                "top1": top1[name],
                "throughput": speed[name]["throughput"],
                "over_fp32_clean": speed[name]["throughput"] / base,
                "over_fp32_exported": speed[name]["throughput"]
                / speed["fp32_exported"]["throughput"],
            }
            for name in LABELS
        },
        "kernel_timing_fp32_nodes": kernel_timing,
        "emulated_avx2": emulated,
    }
    markdown = _markdown(result)
    path = write_results("targets", result, markdown)
    print(markdown)
    print(f"wrote {path}")


def _models(cache: Path) -> tuple[dict[str, onnx.ModelProto], dict[str, str]]:
    path, calib = cache / "resnet50.onnx", cache / "calib.npz"
    avx2 = quantize(
        path, calib, Recipe(target="avx2", kernel_timing=False), RunOptions(threads=THREADS)
    )
    vnni = quantize(
        path, calib, Recipe(target="vnni", kernel_timing=False), RunOptions(threads=THREADS)
    )
    models = {
        "fp32_exported": onnx.load(str(path)),
        "fp32_clean": avx2.fp32_model,
        "avx2": avx2.model,
        "vnni": vnni.model,
    }
    timed = {}
    if host_target() == "avx2":
        result = quantize(path, calib, Recipe(), RunOptions(threads=THREADS))
        models["avx2_timed"] = result.model
        timed = {d.name: d.reason for d in result.decisions if d.reason.startswith("INT8 slower")}
    else:
        models["avx2_timed"] = avx2.model  # kernel timing measures only on the CPU it targets
    return models, timed


def _top1(sess, images: np.ndarray, labels: np.ndarray) -> float:
    logits = run_batches(sess, {sess.get_inputs()[0].name: images}, 250)[0]
    return 100 * float(np.mean(logits.argmax(axis=1) == labels))


def _emulated_top1(
    models: dict[str, onnx.ModelProto], images: np.ndarray, labels: np.ndarray, n: int
) -> dict:
    """Top-1 of each model under qemu's AVX2-only CPU (plain ORT kernels), on the first n images."""
    if not AS_CPU.exists():
        return {"status": f"not run: {AS_CPU} is missing"}
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(Path(tmp) / "test.npz", image=images[:n], label=labels[:n])
        paths = []
        for name, model in models.items():
            onnx.save(model, str(Path(tmp) / f"{name}.onnx"))
            paths.append(str(Path(tmp) / f"{name}.onnx"))
        run = subprocess.run(
            [
                str(AS_CPU),
                "avx2",
                sys.executable,
                "-m",
                "benchmarks.targets_child",
                str(Path(tmp) / "test.npz"),
                *paths,
            ],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parents[1],
        )
    if run.returncode != 0:
        return {
            "status": f"failed: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode}"
        }
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    return {
        "status": "ok",
        "images": n,
        "isa": answer["isa"],
        "top1": dict(zip(models, answer["top1"])),
    }


def _markdown(result: dict) -> str:
    rows, emulated = result["rows"], result["emulated_avx2"]
    lines = [
        f"# INT8 per target: {result['model']}",
        "",
        f"Top-1 on {result['test_images']} test images; throughput at batch {result['batch']}, {result['threads']} threads, on this CPU.",
        "",
        "| model | top-1 % | img/s | x FP32 clean-up | x FP32 as exported |",
        "|---|---|---|---|---|",
    ]
    for row in rows.values():
        lines.append(
            f"| {row['label']} | {row['top1']:.2f} | {row['throughput']:.1f} | {row['over_fp32_clean']:.2f} | {row['over_fp32_exported']:.2f} |"
        )
    if emulated.get("status") == "ok":
        lines += [
            "",
            f"Under AVX2 emulation ({emulated['isa']['int8_gemm_path']}), top-1 on the first {emulated['images']} test images: "
            + ", ".join(f"{LABELS[name]} {value:.2f}" for name, value in emulated["top1"].items())
            + ".",
        ]
    else:
        lines += ["", f"AVX2 emulation: {emulated['status']}."]
    if result["kernel_timing_fp32_nodes"]:
        lines += [
            "",
            "Kept FP32 by kernel timing: "
            + "; ".join(f"{n} ({r})" for n, r in result["kernel_timing_fp32_nodes"].items())
            + ".",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
