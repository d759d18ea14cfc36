"""Reference vs generated showers, per primary-energy bin, streamed over HDF5 chunks.

Every feature is histogrammed with fixed, physics-chosen edges, so the two files are read
independently and only histograms (not showers) are kept. For each bin and feature the
separation power S = 1/2 sum (h1 - h2)^2 / (h1 + h2) of the normalised histograms is 0 for
identical distributions and 1 for disjoint ones (CaloChallenge 2022). The 3DGAN combined
metric adds the relative errors of the mean moments and of the mean profiles, averaged over bins.

S read from histograms of N showers is biased upwards by a term that falls like 1/N: between
INT8 and FP32 showers of the same latents, a per-shower jitter of 1 % moves showers across
bin edges and reads 0.02-0.04 at 1344 showers. Each histogram is therefore also kept for the
even- and odd-numbered showers, and S is also reported extrapolated to infinite N (as
CaloChallenge does for its Frechet distance).
"""

from dataclasses import dataclass, field

import numpy as np

from physics_metrics.features import AXES, CELL_FLOOR_GEV, projections, shower_features
from physics_metrics.showerfile import Showers

DEFAULT_BINS_GEV = (10, 50, 100, 200, 300, 400, 490)
HALF_WIDTH_GEV = 5.0
CELLS = 25
# Every edge set spans its feature's whole physical range, and values beyond the ends are
# counted in the end bins: a histogram that drops showers compares only a tail of them (the
# first edges stopped m2 at 30 cells^2, below most of the generator's 400 GeV showers: their
# m2_x is 40 +- 21 %). Shower widths span decades, from a simulated shower's m2 near 1 cell^2
# to a diffuse generated one's 40, so m2 is binned in equal ratios (9 % per bin); the rest linearly.
EDGES = {
    "sampling_fraction": np.linspace(0, 0.1, 201),
    "total_energy_over_centre": np.linspace(0, 0.1, 201),  # total energy / bin centre: SF-like
    **{f"m1_{a}": np.linspace(0, CELLS, 51) for a in AXES},
    **{
        f"m2_{a}": np.geomspace(0.1, 150, 81) for a in AXES
    },  # the widest possible spread is 144 (two cells 24 apart)
    **{f"hottest_{a}": np.arange(-0.5, CELLS + 0.5) for a in AXES},
    "hits": np.arange(0, CELLS**3 + 100, 100),
    "cell_log10_energy": np.linspace(np.log10(CELL_FLOOR_GEV), 1, 71),
}
MOMENTS = [f"m{k}_{a}" for k in (1, 2) for a in AXES]


def separation_power(h1: np.ndarray, h2: np.ndarray) -> float:
    p, q = h1 / max(h1.sum(), 1e-300), h2 / max(h2.sum(), 1e-300)
    both = (p + q) > 0
    return float(0.5 * np.sum((p[both] - q[both]) ** 2 / (p[both] + q[both])))


@dataclass
class _BinAccumulator:
    """Histograms, profile sums and moment sums of the showers that fell in one energy bin."""

    centre: float
    count: int = 0
    halves: dict = field(
        default_factory=dict
    )  # feature -> counts (2, bins) of the even- and odd-numbered showers
    profiles: dict = field(default_factory=lambda: {a: np.zeros(CELLS) for a in AXES})
    sums: dict = field(default_factory=lambda: dict.fromkeys([*MOMENTS, "sampling_fraction"], 0.0))

    def add(self, showers: np.ndarray, energies: np.ndarray, odd: np.ndarray) -> None:
        """`odd`: whether each shower's row in its file is odd-numbered (the half it counts in)."""
        features = shower_features(showers, energies)
        features["total_energy_over_centre"] = features.pop("total_energy") / self.centre
        for name, values in features.items():
            self._count(name, values, odd)
        hit = showers > CELL_FLOOR_GEV
        self._count(
            "cell_log10_energy",
            np.log10(showers[hit]),
            np.broadcast_to(odd[:, None, None, None], hit.shape)[hit],
        )
        for axis, profile in projections(showers).items():
            self.profiles[axis] += profile.sum(axis=0)
        for name in self.sums:
            self.sums[name] += float(features[name].sum())
        self.count += len(showers)

    def _count(self, name: str, values: np.ndarray, odd: np.ndarray) -> None:
        edges = EDGES[name]
        values = np.clip(values, edges[0], edges[-1])
        counts = np.stack([np.histogram(values[odd == half], edges)[0] for half in (False, True)])
        self.halves[name] = self.halves.get(name, 0) + counts

    @property
    def histograms(self) -> dict:
        return {name: counts.sum(axis=0) for name, counts in self.halves.items()}

    def mean(self, name: str) -> float:
        return self.sums[name] / self.count


def _accumulate(showers: Showers, centres, half_width: float, chunk: int) -> list[_BinAccumulator]:
    bins = [_BinAccumulator(float(c)) for c in centres]
    start = 0
    for block, energies in showers.chunks(chunk):
        odd = (start + np.arange(len(block))) % 2 == 1
        for b in bins:
            inside = np.abs(energies - b.centre) <= half_width
            if inside.any():
                b.add(block[inside], energies[inside], odd[inside])
        start += len(block)
    return bins


@dataclass
class Comparison:
    bins: list[dict]
    combined_3dgan: float
    max_separation: dict  # feature -> largest S over the bins
    max_separation_infinite_n: dict  # the same, each S extrapolated to infinitely many showers

    def to_dict(self) -> dict:
        return {
            "bins": self.bins,
            "combined_3dgan": self.combined_3dgan,
            "max_separation": self.max_separation,
            "max_separation_infinite_n": self.max_separation_infinite_n,
        }


def extrapolated_separation(reference_halves: np.ndarray, generated_halves: np.ndarray) -> float:
    """S at infinite N from the two halves' histograms (2, bins) each: finite samples add a
    term that falls like 1/N (sample noise, and showers jittering across bin edges), so
    S_inf = 2 S(N) - S(N/2). An estimate: it scatters around 0 for equal distributions."""
    whole = separation_power(reference_halves.sum(axis=0), generated_halves.sum(axis=0))
    half = np.mean([separation_power(r, g) for r, g in zip(reference_halves, generated_halves)])
    return float(2 * whole - half)


def compare(
    reference: Showers,
    generated: Showers,
    centres=DEFAULT_BINS_GEV,
    half_width: float = HALF_WIDTH_GEV,
    chunk: int = 500,
) -> Comparison:
    ref_bins = _accumulate(reference, centres, half_width, chunk)
    gen_bins = _accumulate(generated, centres, half_width, chunk)
    rows, metric_terms = [], []
    for ref, gen in zip(ref_bins, gen_bins):
        if not ref.count or not gen.count:
            continue
        ref_counts, gen_counts = ref.histograms, gen.histograms
        separation = {
            name: separation_power(ref_counts[name], gen_counts[name]) for name in ref_counts
        }
        shapes = {
            a: (ref.profiles[a] / ref.profiles[a].sum(), gen.profiles[a] / gen.profiles[a].sum())
            for a in AXES
        }
        separation.update({f"profile_{a}": separation_power(*shapes[a]) for a in AXES})
        moment_error = sum(
            abs(gen.mean(m) - ref.mean(m)) / max(abs(ref.mean(m)), 1e-12) for m in MOMENTS
        )
        profile_error = sum(
            float(np.mean(np.abs(g - r)[r > 0] / r[r > 0])) for r, g in shapes.values()
        )
        metric_terms.append(moment_error + profile_error)
        rows.append(
            {
                "energy_gev": ref.centre,
                "showers_reference": ref.count,
                "showers_generated": gen.count,
                "sampling_fraction_reference": ref.mean("sampling_fraction"),
                "sampling_fraction_generated": gen.mean("sampling_fraction"),
                "sampling_fraction_shift": gen.mean("sampling_fraction")
                / ref.mean("sampling_fraction")
                - 1,
                "separation": separation,
                "separation_infinite_n": {
                    name: extrapolated_separation(ref.halves[name], gen.halves[name])
                    for name in ref.halves
                },
                "profiles": {
                    a: {"reference": shapes[a][0].tolist(), "generated": shapes[a][1].tolist()}
                    for a in AXES
                },
                "histograms": {
                    name: {
                        "reference": ref_counts[name].tolist(),
                        "generated": gen_counts[name].tolist(),
                    }
                    for name in ref_counts
                },
                "combined_3dgan": moment_error + profile_error,
            }
        )
    features = rows[0]["separation"].keys() if rows else []
    max_separation = {f: max(r["separation"][f] for r in rows) for f in features}
    extrapolated = {
        f: max(r["separation_infinite_n"][f] for r in rows)
        for f in (rows[0]["separation_infinite_n"] if rows else [])
    }
    return Comparison(
        rows,
        float(np.mean(metric_terms)) if metric_terms else float("nan"),
        max_separation,
        extrapolated,
    )
