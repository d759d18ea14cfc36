"""`python -m benchmarks.calogan_targets`: the 3DGAN generator's physics on an AVX2 CPU, with
INT8 made for each target, against the FP32 graph INT8 starts from.

The INT8 generators (8 energy ranges, as `python -m models.calogan quantize --target T` makes
them) run on an emulated CPU (../shared/tools/as-cpu avx2, qemu: MLAS takes its AVX2 kernels,
whose u8s8 products saturate in int16, whatever the host), so this runs on any machine; accuracy
only, emulated speed means nothing. The FP32 baseline runs natively (no integer kernel to
saturate; qemu emulates float vectors in software). Rows: INT8 made for avx2 (paired weights),
emulated and natively (the two must agree: paired weights are exact on both paths); INT8 made for
vnni/amx (full-range weights) as quantize's runtime runs it on AVX2 (ORT's exact U8U8 kernels,
with a warning), and with ORT's default kernels (what a quantizer unaware of the target meets).
Every generator gets the same latents; the physics compares each with FP32 on them. Needs the
cached training (`python -m models.calogan train`), else seeded random weights (the JSON says
which). Writes benchmarks/results/calogan_targets.{json,md}.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from benchmarks.results import sized, write_results
from benchmarks.targets import AS_CPU
from models.calogan.evaluate import bin_energies
from models.calogan.generate import (
    EnergyRangeModels,
    energy_edges,
    latents,
    onnx_source,
    quantize_by_energy,
    trained_generator,
)
from physics_metrics import compare
from physics_metrics.report import max_sf_shift, worst_separation
from physics_metrics.showerfile import open_showers, write_shower_file
from quantize.frontend.tensorflow import keras_to_onnx
from quantize.pipeline import cleaned_fp32
from quantize.target import host_isa

RANGES, SAMPLES = sized(8, 2), sized(4096, 256)
PER_BIN = sized(192, 16)  # 7 analysis bins: 1344 showers, about 3 minutes a generator emulated
THREADS = 2
LABELS = {
    "fp32_cleaned": "FP32 after clean-up (baseline, native)",
    "avx2": "INT8 for avx2 (paired weights), emulated AVX2",
    "avx2_native": "INT8 for avx2 (paired weights), native",
    "vnni_exact": "INT8 for vnni/amx, quantize's runtime (exact U8U8 kernels), emulated AVX2",
    "vnni_default": "INT8 for vnni/amx, ORT default kernels (saturating), emulated AVX2",
}
EMULATED = {"avx2": ("avx2", None), "vnni_exact": ("vnni", None), "vnni_default": ("vnni", False)}


def main() -> None:
    if not AS_CPU.exists():
        raise SystemExit(f"calogan_targets: {AS_CPU} is missing (the AVX2 emulator)")
    model, weights = trained_generator()
    energies = bin_energies(PER_BIN, seed=3)
    z = latents(energies, seed=4)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fp32_path = tmp / "generator.onnx"
        onnx.save(keras_to_onnx(model), fp32_path)
        edges = energy_edges(RANGES)
        for target in ("avx2", "vnni"):
            quantize_by_energy(fp32_path, edges, SAMPLES, THREADS, target=target).save(tmp / target)
            print(f"quantized for {target}", flush=True)
        native = {
            "fp32_cleaned": onnx_source(cleaned_fp32(fp32_path), THREADS),
            "avx2_native": EnergyRangeModels.load(tmp / "avx2").source(THREADS),
        }
        for name, source in native.items():
            write_shower_file(tmp / f"{name}.h5", source(z, energies), energies)
        emulated_isa = _emulated_showers(tmp, z, energies)
        showers = {name: open_showers(tmp / f"{name}.h5") for name in LABELS}
        baseline = showers["fp32_cleaned"]
        rows = {name: _versus(baseline, s) for name, s in showers.items() if s is not baseline}
        rows["avx2"]["max_cell_difference_to_native_gev"] = float(
            np.max(np.abs(showers["avx2"].ecal[:] - showers["avx2_native"].ecal[:]))
        )
    result = {
        "isa_emulated": emulated_isa,
        "isa_native": host_isa(),
        "weights": weights,
        "energy_ranges": RANGES,
        "showers": len(energies),
        "labels": LABELS,
        "baseline": "fp32_cleaned",
        "vs_fp32": rows,
    }
    markdown = _markdown(result)
    path = write_results("calogan_targets", result, markdown)
    print(markdown)
    print(f"wrote {path}")


def _emulated_showers(folder: Path, z: np.ndarray, energies: np.ndarray) -> dict:
    """Showers of each EMULATED run, written to `folder` by benchmarks/calogan_targets_child.py
    under qemu's AVX2-only CPU; returns that CPU's INT8 path."""
    np.savez(folder / "latents.npz", latents=z, energies=energies)
    spec = {
        "latents": str(folder / "latents.npz"),
        "out": str(folder),
        "runs": {
            name: {"folder": str(folder / target), "exact_kernels": exact}
            for name, (target, exact) in EMULATED.items()
        },
    }
    (folder / "spec.json").write_text(json.dumps(spec))
    run = subprocess.run(  # its progress and errors go to our stderr
        [str(AS_CPU), "avx2", sys.executable, "-m", "benchmarks.calogan_targets_child"]
        + [str(folder / "spec.json")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    if run.returncode != 0:
        raise SystemExit(f"calogan_targets: the emulated run failed (exit {run.returncode})")
    return json.loads(run.stdout.strip().splitlines()[-1])["isa"]


def _versus(fp32, int8) -> dict:
    """The physics of `int8` against FP32's showers of the same latents, and how far each
    shower's total energy moved."""
    c = compare(fp32, int8).to_dict()
    totals = [f.ecal[:].sum(axis=(1, 2, 3)) for f in (fp32, int8)]
    feature, separation = worst_separation(c)
    return {
        "max_separation_power": separation,
        "worst_feature": feature,
        "max_sampling_fraction_shift": max_sf_shift(c),
        "mean_abs_energy_change": float(np.mean(np.abs(totals[1] / totals[0] - 1))),
        "max_separation": c["max_separation"],
    }


def _markdown(r: dict) -> str:
    lines = [
        "# 3DGAN generator per INT8 target, on an emulated AVX2 CPU "
        f"({r['isa_emulated']['int8_gemm_path']})",
        "",
        f"{r['showers']} showers (7 energy bins), the same latents for every generator; "
        f"{r['energy_ranges']} energy-range models per target; generator weights: {r['weights']}. "
        "Accuracy only. INT8 runs under emulation unless marked native; the FP32 baseline "
        f"natively ({r['isa_native']['cpu']}).",
        "",
        "| generator | worst separation vs FP32 (feature) | sampling-fraction shift "
        "| mean shower-energy change |",
        "|---|---|---|---|",
    ]
    for name, row in r["vs_fp32"].items():
        lines.append(
            f"| {r['labels'][name]} | {row['max_separation_power']:.4f} ({row['worst_feature']}) "
            f"| {100 * row['max_sampling_fraction_shift']:.2f} % "
            f"| {100 * row['mean_abs_energy_change']:.2f} % |"
        )
    difference = r["vs_fp32"]["avx2"]["max_cell_difference_to_native_gev"]
    lines += [
        "",
        f"INT8 for avx2, emulated against native: largest cell difference {difference:.3g} GeV.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
