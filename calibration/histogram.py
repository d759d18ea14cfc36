"""A histogram of fixed size that follows a stream of values whose range is not known ahead.

It covers [-limit, limit] with `bins` equal bins. When a value falls outside, the limit
doubles and adjacent bin pairs merge: the new bin edges are a subset of the old ones, so the
counts stay exact (no re-binning by interpolation). Memory is `bins` int64 counters per tensor
whatever the number of samples, and binning works through a tensor `CHUNK` values at a time,
so that its scratch arrays stay in cache and no larger than a few MB whatever the tensor.

Values beyond +-BEYOND_LIMIT, and non-finite ones, are counted apart in `beyond` instead of
binned: an attention mask's `finfo(float32).min` would double the limit to infinity. No uint8
scale can hold such a tensor; the pipeline keeps its readers and writers FP32.
"""

import numpy as np

DEFAULT_BINS = 8192
BEYOND_LIMIT = 1e30
CHUNK = 1 << 18


class StreamingHistogram:
    def __init__(self, bins: int = DEFAULT_BINS):
        if bins % 4:
            raise ValueError("bins must be a multiple of 4")
        self.counts = np.zeros(bins, np.int64)
        self.limit = 0.0
        self.min = np.inf
        self.max = -np.inf
        self.zeros = 0  # exact zeros (ReLU outputs, padding): exact in uint8 at any scale
        self.beyond = 0  # values not binned: non-finite or beyond +-BEYOND_LIMIT

    @property
    def bins(self) -> int:
        return len(self.counts)

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(-self.limit, self.limit, self.bins + 1)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def update(self, values: np.ndarray) -> None:
        flat = np.asarray(values, np.float32).ravel()
        if flat.size == 0:
            return
        lo, hi = float(flat.min()), float(flat.max())
        if not -BEYOND_LIMIT <= lo <= hi <= BEYOND_LIMIT:  # False for NaN too
            flat = self._without_beyond(flat)
            if flat.size == 0:
                return
            lo, hi = float(flat.min()), float(flat.max())
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        peak = max(abs(lo), abs(hi))
        if self.limit == 0.0:
            self.limit = peak if peak > 0 else 1e-8
        while peak > self.limit:
            self._double()
        for start in range(0, flat.size, CHUNK):
            chunk = flat[start : start + CHUNK]
            self.zeros += int(np.count_nonzero(chunk == 0))
            self.counts += self._bin_counts(chunk)

    def _bin_counts(self, flat: np.ndarray) -> np.ndarray:
        """Counts of `flat` (within +-limit) per bin. Written as x * (bins/2)/limit + bins/2, 0
        maps exactly to the centre bin (bins/2), which doubling keeps in place: the methods rely
        on exact zeros being counted there. float32 and in place: this is calibration's hot loop."""
        half = self.bins // 2
        index = flat * np.float32(half / self.limit)
        index += np.float32(half)
        # +limit itself lands one past the last bin; -limit may round a hair below 0, which the
        # cast truncates to 0
        counts = np.bincount(index.astype(np.int64), minlength=self.bins + 1)
        counts[self.bins - 1] += counts[self.bins :].sum()
        return counts[: self.bins]

    def _without_beyond(self, flat: np.ndarray) -> np.ndarray:
        """`flat` without the values counted in `beyond`, whose finite ones still set min/max."""
        within = np.abs(flat) <= BEYOND_LIMIT  # False for NaN and inf too
        self.beyond += int(flat.size - np.count_nonzero(within))
        finite = flat[np.isfinite(flat)]
        if finite.size:
            self.min = min(self.min, float(finite.min()))
            self.max = max(self.max, float(finite.max()))
        return flat[within]

    def _double(self) -> None:
        merged = self.counts.reshape(-1, 2).sum(axis=1)
        quarter = self.bins // 4
        self.counts = np.concatenate(
            [np.zeros(quarter, np.int64), merged, np.zeros(quarter, np.int64)]
        )
        self.limit *= 2
