"""Range selection: from an activation's histogram to the [lo, hi] that uint8 will cover.

A method is a small frozen object (`MinMax()`, `Percentile(99.999)`, `Entropy()`, `Mse()`)
whose `range(histogram)` gives the raw range; `choose_range` widens it to contain 0, so that
zero is exactly representable (the zero point) and ReLU-like clamping at 0 is exact.
"""

from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from calibration.histogram import StreamingHistogram

UINT8_LEVELS = 256


def minmax(h: StreamingHistogram) -> tuple[float, float]:
    return h.min, h.max


def percentile(h: StreamingHistogram, percent: float = 99.999) -> tuple[float, float]:
    """Clip the tails so that `percent` % of the values lie inside, on each side."""
    cdf = np.cumsum(h.counts)
    tail = (1 - percent / 100) * cdf[-1]
    edges = h.edges
    hi = edges[1 + np.searchsorted(cdf, cdf[-1] - tail)]
    lo = edges[np.searchsorted(cdf, tail, side="right")]
    return max(h.min, lo), min(h.max, hi)


def entropy(h: StreamingHistogram) -> tuple[float, float]:
    """KL-divergence thresholds (TensorRT's method, used by the INT8 Transformer paper).

    uint8 is asymmetric, so each side of zero gets its own threshold, found on its own half of
    the histogram (all 256 levels for a non-negative tensor, 128 a side otherwise). Folding
    |x| instead, as symmetric int8 does, lets a spike on one side (the background value of an
    image) set the threshold of the other and clip its content. Exact zeros are left out: they
    cost nothing at any threshold, and after a ReLU their spike would dominate the divergence.
    """
    half = h.bins // 2
    width = h.limit / half
    positive = h.counts[half:].copy()
    positive[0] -= h.zeros
    if h.min >= 0:
        return 0.0, min(h.max, _kl_threshold(positive, UINT8_LEVELS) * width)
    negative = h.counts[:half][::-1]
    levels = UINT8_LEVELS // 2
    return max(h.min, -_kl_threshold(negative, levels) * width), min(
        h.max, _kl_threshold(positive, levels) * width
    )


def _kl_threshold(magnitude: np.ndarray, levels: int) -> int:
    """The number of bins, from zero, whose quantization to `levels` loses the least information."""
    if not magnitude.any():
        return 0
    used = int(np.flatnonzero(magnitude)[-1]) + 1
    if used <= levels:
        return used
    candidates = np.unique(np.linspace(levels, used, min(used - levels + 1, 256)).astype(int))
    divergences = [_kl_after_quantization(magnitude, i, levels) for i in candidates]
    return int(candidates[int(np.argmin(divergences))])


def _kl_after_quantization(counts: np.ndarray, size: int, levels: int) -> float:
    p = counts[:size].astype(np.float64)
    p[-1] += counts[size:].sum()
    starts = np.linspace(0, size, levels + 1).astype(int)[:-1]
    nonzero = counts[:size] > 0
    group_total = np.add.reduceat(counts[:size].astype(np.float64), starts)
    group_nonzero = np.add.reduceat(nonzero.astype(np.float64), starts)
    group_size = np.diff(np.append(starts, size))
    q = np.repeat(group_total / np.maximum(group_nonzero, 1), group_size) * nonzero
    p /= p.sum()
    q /= max(q.sum(), 1e-30)
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


def mse(h: StreamingHistogram) -> tuple[float, float]:
    """The shrink of the observed range that minimises expected rounding + clipping error."""
    lo, hi = min(h.min, 0.0), max(h.max, 0.0)
    centres = 0.5 * (h.edges[:-1] + h.edges[1:])
    weights = h.counts.astype(np.float64)
    keep = weights > 0
    centres, weights = centres[keep], weights[keep]
    scales = np.linspace(0.02, 1.0, 99)[:, None]
    c_lo, c_hi = scales * lo, scales * hi
    step = (c_hi - c_lo) / (UINT8_LEVELS - 1)
    clipped = np.clip(centres[None, :], c_lo, c_hi)
    error = (centres[None, :] - clipped) ** 2 + step**2 / 12
    best = float(scales[int(np.argmin(error @ weights)), 0])
    return best * lo, best * hi


@dataclass(frozen=True)
class MinMax:
    name: ClassVar[str] = "minmax"

    def range(self, h: StreamingHistogram) -> tuple[float, float]:
        return minmax(h)


@dataclass(frozen=True)
class Percentile:
    percent: float = 99.999
    name: ClassVar[str] = "percentile"

    def __post_init__(self):
        if not 0 < self.percent <= 100:
            raise ValueError("percentile must be in (0, 100]")

    def range(self, h: StreamingHistogram) -> tuple[float, float]:
        return percentile(h, self.percent)


@dataclass(frozen=True)
class Entropy:
    name: ClassVar[str] = "entropy"

    def range(self, h: StreamingHistogram) -> tuple[float, float]:
        return entropy(h)


@dataclass(frozen=True)
class Mse:
    name: ClassVar[str] = "mse"

    def range(self, h: StreamingHistogram) -> tuple[float, float]:
        return mse(h)


RangeMethod = MinMax | Percentile | Entropy | Mse
METHODS: dict[str, type] = {m.name: m for m in (MinMax, Percentile, Entropy, Mse)}


def method_to_dict(method: RangeMethod) -> dict:
    return {"name": method.name, **asdict(method)}


def method_from_dict(data: dict) -> RangeMethod:
    """The method `method_to_dict` wrote; ValueError for an unknown name or parameter."""
    fields = dict(data)
    name = fields.pop("name", None)
    if name not in METHODS:
        raise ValueError(f"unknown calibration method {name!r}; choose from {', '.join(METHODS)}")
    try:
        return METHODS[name](**fields)
    except TypeError:
        raise ValueError(
            f"calibration method {name} takes no parameters {sorted(fields)}"
        ) from None


def choose_range(h: StreamingHistogram, method: RangeMethod) -> tuple[float, float]:
    lo, hi = method.range(h)
    return min(float(lo), 0.0), max(float(hi), 0.0)
