import numpy as np
import pytest

from calibration import METHODS, Entropy, MinMax, Mse, StreamingHistogram, choose_range


def _histogram(values):
    h = StreamingHistogram()
    h.update(values)
    return h


@pytest.fixture
def with_outliers():
    rng = np.random.default_rng(3)
    body = np.abs(rng.normal(0, 1, 200_000))
    return np.concatenate([body, [60.0, 80.0]]).astype(np.float32)


def test_minmax_covers_everything(with_outliers):
    lo, hi = choose_range(_histogram(with_outliers), MinMax())
    assert lo == 0.0 and hi == pytest.approx(80.0)


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_clipping_methods_ignore_rare_outliers(method, with_outliers):
    lo, hi = choose_range(_histogram(with_outliers), METHODS[method]())
    assert lo == 0.0
    assert 2.0 < hi < 20.0, hi


def test_signed_data_gets_a_range_around_zero():
    values = np.random.default_rng(4).normal(1.0, 1.0, 100_000).astype(np.float32)
    for method in METHODS:
        lo, hi = choose_range(_histogram(values), METHODS[method]())
        assert lo < 0 < hi, method
        assert values.min() <= lo and hi <= values.max() + 1e-6, method


def test_positive_data_range_still_contains_zero():
    lo, hi = choose_range(_histogram(np.random.default_rng(5).uniform(2, 3, 1000)), MinMax())
    assert lo == 0.0 and hi == pytest.approx(3.0, rel=1e-3)


def _quantization_mse(values, lo, hi):
    scale = (hi - lo) / 255
    q = np.clip(np.round((values - lo) / scale), 0, 255) * scale + lo
    return float(np.mean((values - q) ** 2))


def test_mse_range_beats_minmax_on_heavy_tails():
    values = np.random.default_rng(6).laplace(0, 1, 300_000).astype(np.float32)
    h = _histogram(values)
    lo, hi = choose_range(h, Mse())
    assert hi < values.max() and lo > values.min()
    assert _quantization_mse(values, lo, hi) < 0.9 * _quantization_mse(
        values, *choose_range(h, MinMax())
    )


def test_entropy_on_relu_outputs_with_many_zeros():
    rng = np.random.default_rng(7)
    relu = np.maximum(rng.normal(0, 1, 400_000), 0).astype(np.float32) * 3.7979 / 4.5
    lo, hi = choose_range(_histogram(relu), Entropy())
    assert lo == 0.0 and 0.5 * relu.max() < hi <= relu.max()


def test_entropy_keeps_each_side_of_a_spiky_image_input():
    # Normalised images: a spike at the background value below zero, content above it.
    rng = np.random.default_rng(8)
    background = np.full(300_000, -0.81, np.float32)
    content = rng.uniform(-0.8, 2.02, 60_000).astype(np.float32)
    lo, hi = choose_range(_histogram(np.concatenate([background, content])), Entropy())
    assert lo == pytest.approx(-0.81, abs=0.01)
    assert hi > 1.6
