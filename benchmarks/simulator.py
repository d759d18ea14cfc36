"""`python -m benchmarks.simulator`: shower simulator speed (2 processes) and its physics checks."""

import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.results import sized, write_results
from models.calogan import detector
from models.calogan.showers import write_showers
from models.calogan.simulate import geometry, simulate
from quantize.target import host_isa

ENERGIES = (10, 50, 100, 200, 500)
SHOWERS = sized(10000, 1000)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        write_showers(Path(tmp) / "showers.h5", SHOWERS, seed=0)
        rate = SHOWERS / (time.perf_counter() - start)
    geo, rng = geometry(), np.random.default_rng(1)
    centres = 0.5 * (detector.layer_edges_x0()[:-1] + detector.layer_edges_x0()[1:])
    checks = {}
    for e in ENERGIES:
        showers = simulate(np.full(500, float(e)), rng, geo)
        total = showers.sum(axis=(1, 2, 3))
        profile = showers.sum(axis=(0, 1, 2))
        fit = float(detector.sampling_fraction_fit(e))
        checks[e] = {
            "sampling_fraction": float(total.mean() / e),
            "fit_3dgan": fit,
            "ratio_to_fit": float(total.mean() / e / fit),
            "resolution": float(total.std() / total.mean()),
            "mean_depth_x0": float(np.sum(profile * centres) / profile.sum()),
        }
    result = {
        "machine": host_isa(),
        "showers_per_s_uniform_2_500_gev_2_processes": rate,
        "showers": SHOWERS,
        "by_energy_gev": checks,
    }
    lines = [
        f"# Shower simulator: {rate:.0f} showers/s ({SHOWERS} showers, 2-500 GeV, 2 processes, HDF5 written)",
        "",
        "| Ep (GeV) | sum/Ep | 3DGAN fit | ratio | resolution | mean depth (X0) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {e} | {c['sampling_fraction']:.4f} | {c['fit_3dgan']:.4f} | {c['ratio_to_fit']:.3f} | {c['resolution']:.3f} | {c['mean_depth_x0']:.2f} |"
        for e, c in checks.items()
    ]
    markdown = "\n".join(lines) + "\n"
    write_results("simulator", result, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
