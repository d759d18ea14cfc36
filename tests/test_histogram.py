import tracemalloc

import numpy as np

from calibration import StreamingHistogram, histogram


def test_counts_stay_exact_while_the_range_doubles():
    rng = np.random.default_rng(1)
    chunks = [rng.normal(0, s, 5000).astype(np.float32) for s in (0.1, 1.0, 7.0, 50.0)]
    h = StreamingHistogram(bins=1024)
    for chunk in chunks:
        h.update(chunk)
    everything = np.concatenate(chunks)
    expected, _ = np.histogram(everything, bins=h.edges)
    assert h.total == everything.size
    assert h.limit >= np.abs(everything).max()
    # Values on a bin edge may fall either side in float32; nothing else may move.
    assert np.abs(h.counts - expected).sum() <= 0.001 * everything.size
    assert (h.min, h.max) == (everything.min(), everything.max())


def test_memory_is_fixed_whatever_the_number_of_values():
    h = StreamingHistogram(bins=256)
    for _ in range(50):
        h.update(np.random.default_rng(2).exponential(3.0, 20000))
    assert h.counts.shape == (256,) and h.total == 50 * 20000


def test_constant_zero_tensor_is_handled():
    h = StreamingHistogram(bins=64)
    h.update(np.zeros(100))
    assert h.total == 100 and h.limit > 0


def test_exact_zeros_always_land_in_the_centre_bin():
    for limit in (3.7979, 6.7465, 0.123, 1e-3, 77.7):
        h = StreamingHistogram(bins=8192)
        h.update(np.array([limit, 0.0, 0.0, 0.0], np.float32))
        h.update(np.array([2.5 * limit], np.float32))  # doubles the range: zeros must stay centred
        assert h.counts[h.bins // 2] >= h.zeros == 3, limit


def test_the_range_ends_land_in_the_end_bins_and_non_finite_values_are_counted_apart():
    for limit in (3.7979, 0.123, 1e-3, 77.7):
        h = StreamingHistogram(bins=64)
        h.update(np.array([-limit, limit, np.nan, np.inf, -2e30, 0.0], np.float32))
        assert h.limit == np.float32(limit) and h.total == 3 and h.beyond == 3, limit
        assert h.counts[0] == h.counts[-1] == h.counts[32] == 1 and h.zeros == 1, limit
        assert (h.min, h.max) == (np.float32(-2e30), np.float32(limit)), limit


def test_a_tensor_is_binned_chunk_by_chunk_with_the_counts_of_one_pass(monkeypatch):
    values = np.random.default_rng(3).normal(0, 2.0, 5500).astype(np.float32)
    values[::7] = 0.0
    whole = StreamingHistogram(bins=256)
    whole.update(values)
    monkeypatch.setattr(histogram, "CHUNK", 1000)
    chunked = StreamingHistogram(bins=256)
    chunked.update(values)
    assert np.array_equal(chunked.counts, whole.counts) and chunked.total == values.size
    assert (chunked.zeros, chunked.min, chunked.max, chunked.limit) == (
        whole.zeros,
        whole.min,
        whole.max,
        whole.limit,
    )


def test_binning_a_large_tensor_needs_scratch_of_a_few_chunks_not_of_the_tensor():
    values = np.random.default_rng(4).normal(0, 1.0, 8 * histogram.CHUNK).astype(np.float32)
    h = StreamingHistogram()
    tracemalloc.start()
    h.update(values)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # One pass over the whole tensor would hold 13 bytes a value: 104 bytes per CHUNK value here.
    assert peak < 32 * histogram.CHUNK, peak
