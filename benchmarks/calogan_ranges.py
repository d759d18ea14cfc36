"""`python -m benchmarks.calogan_ranges`: the 3DGAN generator's INT8 models, one per energy range,
each timed against the FP32 graph INT8 starts from (after quantize's clean-up), batch 64 of the
range's middle energy, 2 threads, in ONNX Runtime, interleaved in one run.

Columns per range: the INT8 model as calibrated, its output cells uncorrected; and what `python -m
models.calogan quantize` ships: the same with its cells corrected (the final ReLU replaced by the
cell maps of models/calogan/cell_maps.py), timed against FP32 as it is made and FP32 where INT8
was not 5 % faster (the speed check's verdict and measure are recorded). `benchmarks.calogan`
times the 250 GeV range's model only, beside the rivals and the physics; this shows every range.

Writes benchmarks/results/calogan_ranges_TARGET.{json,md} (TARGET: this CPU's INT8 path).
"""

import re
import tempfile
from pathlib import Path

import numpy as np
import onnx

from benchmarks.results import for_this_cpu, sized, write_results
from models.calogan.generate import (
    energy_edges,
    latents,
    quantize_by_energy,
    trained_generator,
)
from quantize.bench import compare_sessions
from quantize.frontend.tensorflow import keras_to_onnx
from quantize.pipeline import WHOLE_FP32, cleaned_fp32
from quantize.target import host_isa

BATCH, THREADS, RANGES, SAMPLES = 64, 2, sized(8, 2), sized(4096, 256)
LABELS = {
    "fp32_cleaned": "FP32 after clean-up (baseline)",
    "int8": "INT8, cells uncorrected",
    "shipped": "shipped: INT8 with cells corrected, or FP32",
}


def main() -> None:
    stem = for_this_cpu("calogan_ranges")
    model, weights = trained_generator()
    edges = energy_edges(RANGES)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "generator.onnx"
        onnx.save(keras_to_onnx(model), path)
        baseline = cleaned_fp32(path)
        uncorrected = quantize_by_energy(path, edges, SAMPLES, THREADS, correct_cells=False)
        shipped = quantize_by_energy(path, edges, SAMPLES, THREADS, speed_check=True)
    ranges = []
    for i in range(RANGES):
        energy = float(np.sqrt(edges[i] * edges[i + 1]))
        models = {
            "fp32_cleaned": baseline,
            "int8": uncorrected.models[i],
            "shipped": shipped.models[i],
        }
        feeds = {"latent": latents(np.full(BATCH, energy), seed=5)}
        speed = compare_sessions(models, feeds, THREADS, min_seconds=sized(12.0, 0.5))
        base = speed["fp32_cleaned"]["throughput"]
        ranges.append(
            {
                "energy_gev": [float(edges[i]), float(edges[i + 1])],
                "timed_at_gev": energy,
                "throughput": {name: s["throughput"] for name, s in speed.items()},
                "over_fp32_cleaned": {name: s["throughput"] / base for name, s in speed.items()},
                "speed_check": shipped.speed_checks[i],
                "speed": speed,
            }
        )
    result = {
        "machine": host_isa(),
        "weights": weights,
        "threads": THREADS,
        "batch": BATCH,
        "calibration_and_correction_latents": SAMPLES,
        "labels": LABELS,
        "baseline": "fp32_cleaned",
        "ranges": ranges,
    }
    write_results(stem, result, _markdown(result))
    print(_markdown(result))


def _markdown(r: dict) -> str:
    lines = [
        f"# 3DGAN INT8 by energy range vs FP32 ({r['weights']}): {r['machine']['cpu']}, INT8 "
        f"path {r['machine']['int8_gemm_path']}, {r['threads']} threads, batch {r['batch']}",
        "",
        "| range (GeV) | "
        + " | ".join(f"{label}, showers/s (x FP32)" for label in r["labels"].values())
        + " | speed check when made |",
        "|---|" + "---|" * (len(r["labels"]) + 1),
    ]
    for row in r["ranges"]:
        low, high = row["energy_gev"]
        cells = " | ".join(
            f"{row['throughput'][name]:.1f} ({row['over_fp32_cleaned'][name]:.2f})"
            for name in r["labels"]
        )
        lines.append(f"| {low:.0f}-{high:.0f} | {cells} | {_verdict(row['speed_check'])} |")
    lines += [
        "",
        "Each range timed at its middle energy (geometric), its models interleaved. Shipped: what "
        "`python -m models.calogan quantize` writes; its speed check timed the INT8 model with "
        "its cells corrected against FP32 as it was made (a batch of the range's calibration "
        "latents) and kept FP32 where INT8 was not 5 % faster.",
    ]
    return "\n".join(lines)


def _verdict(speed_check: str) -> str:
    """A speed check's measure and decision, short: "INT8 1.06x: INT8 kept"."""
    measured = re.search(r"INT8 [0-9.]+x", speed_check)
    kept = "FP32 kept" if speed_check.endswith(WHOLE_FP32) else "INT8 kept"
    return f"{measured.group(0)}: {kept}" if measured else speed_check


if __name__ == "__main__":
    main()
