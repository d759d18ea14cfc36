"""The 3DGAN's evaluator for the core's validation report (`quantize ... --evaluate calogan`).

The metric is the 3DGAN combined metric against simulated showers (lower is better); the
report also gets a physics section: every generator against the simulation and against FP32,
per energy bin, with plots. All generators see the same latents, so their differences from
FP32 are quantization alone. Extra generators (e.g. a rival's INT8) can be set beside ours.
"""

import tempfile
from pathlib import Path

import numpy as np

from models.calogan.generate import ShowerSource, latents, onnx_source
from models.calogan.showers import write_showers_at
from models.calogan.train import ENERGY_RANGE_GEV
from physics_metrics import open_showers
from physics_metrics.compare import DEFAULT_BINS_GEV, HALF_WIDTH_GEV, compare
from physics_metrics.report import compact, physics_html, physics_report
from physics_metrics.showerfile import write_shower_file


def bin_energies(per_bin: int, seed: int) -> np.ndarray:
    """`per_bin` primary energies drawn uniformly in each analysis bin; a bin reaching beyond the
    trained energies holds only its trained part."""
    rng = np.random.default_rng(seed)
    low, high = ENERGY_RANGE_GEV
    return np.concatenate(
        [
            rng.uniform(max(c - HALF_WIDTH_GEV, low), min(c + HALF_WIDTH_GEV, high), per_bin)
            for c in DEFAULT_BINS_GEV
        ]
    )


class PhysicsEvaluator:
    name = "calogan"
    metric = "3DGAN metric vs simulation"
    higher_is_better = False
    FP32, INT8 = "FP32", "INT8 (quantize)"

    def __init__(
        self,
        per_bin: int = 400,
        seed: int = 0,
        threads: int = 0,
        extra: dict[str, ShowerSource] | None = None,
    ):
        self.energies = bin_energies(per_bin, seed)
        self.latents = latents(self.energies, seed + 1)
        self.threads, self.extra = threads, dict(extra or {})
        self._folder = tempfile.TemporaryDirectory(prefix="calogan-physics-")
        self.reference = open_showers(
            write_showers_at(Path(self._folder.name) / "simulation.h5", self.energies, seed)
        )
        self._generated: dict[int, object] = {}

    def evaluate(self, model) -> float:
        return compare(self.reference, self._showers_of(model)).combined_3dgan

    def sections(self, fp32_model, int8_model) -> list[dict]:
        candidates = {
            self.FP32: self._showers_of(fp32_model),
            self.INT8: self._showers_of(int8_model),
        }
        candidates.update(
            {
                label: self._write(label, source(self.latents, self.energies))
                for label, source in self.extra.items()
            }
        )
        data = physics_report(self.reference, candidates, baseline=self.FP32)
        return [
            {
                "title": f"Physics: {len(self.energies)} showers in {len(DEFAULT_BINS_GEV)} energy bins",
                "data": compact(data),
                "html": physics_html(data),
            }
        ]

    def _showers_of(self, model):
        if id(model) not in self._generated:
            self._generated[id(model)] = self._write(
                f"model{len(self._generated)}",
                onnx_source(model, self.threads)(self.latents, self.energies),
            )
        return self._generated[id(model)]

    def _write(self, label: str, showers: np.ndarray):
        path = Path(self._folder.name) / f"{''.join(c if c.isalnum() else '_' for c in label)}.h5"
        return open_showers(write_shower_file(path, showers, self.energies))
