import h5py
import numpy as np
import pytest
from PIL import Image

from calibration import ImagePreprocess, InputSpec, load_feeds, open_calibration, save_feeds
from onnxio import InputError

SPEC = [InputSpec("x", (None, 3, 4, 4), np.dtype(np.float32))]
TWO = [
    InputSpec("a", (None, 2), np.dtype(np.float32)),
    InputSpec("b", (None, 5), np.dtype(np.float32)),
]


def _all(source, batch=7):
    parts = list(source.batches(0, source.num_samples, batch))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_npy_streams_in_batches(tmp_path):
    data = np.random.default_rng(0).normal(size=(30, 3, 4, 4)).astype(np.float32)
    np.save(tmp_path / "c.npy", data)
    source = open_calibration(tmp_path / "c.npy", SPEC)
    assert source.num_samples == 30
    assert [len(b["x"]) for b in source.batches(0, 30, 8)] == [8, 8, 8, 6]
    np.testing.assert_array_equal(_all(source)["x"], data)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_reads_only_the_requested_rows(tmp_path, compressed):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(25, 2)).astype(np.float32), rng.normal(size=(25, 5)).astype(np.float64)
    (np.savez_compressed if compressed else np.savez)(tmp_path / "c.npz", a=a, b=b)
    source = open_calibration(tmp_path / "c.npz", TWO)
    window = list(source.batches(10, 14, 100))[0]
    np.testing.assert_array_equal(window["a"], a[10:14])
    np.testing.assert_allclose(window["b"], b[10:14].astype(np.float32))
    assert window["b"].dtype == np.float32


def test_hdf5_by_input_names_and_by_dataset(tmp_path):
    data = np.random.default_rng(2).normal(size=(12, 3, 4, 4)).astype(np.float32)
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f["x"] = data
        f["other"] = data * 2
    np.testing.assert_array_equal(_all(open_calibration(tmp_path / "c.h5", SPEC))["x"], data)
    np.testing.assert_array_equal(
        _all(open_calibration(f"{tmp_path / 'c.h5'}:other", SPEC))["x"], data * 2
    )


def test_image_directory_is_resized_normalised_and_laid_out(tmp_path):
    for i in range(5):
        Image.fromarray(np.full((9, 7, 3), 50 * i, np.uint8)).save(tmp_path / f"{i}.png")
    (tmp_path / "notes.txt").write_text("ignored")
    prep = ImagePreprocess(scale=1 / 255, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), layout="NCHW")
    batch = _all(open_calibration(tmp_path, SPEC, prep))["x"]
    assert batch.shape == (5, 3, 4, 4)
    np.testing.assert_allclose(
        batch[:, 0, 0, 0], [(50 * i / 255 - 0.5) / 0.5 for i in range(5)], atol=1e-6
    )


def _error(tmp_path, name, spec=SPEC):
    with pytest.raises(InputError) as info:
        source = open_calibration(tmp_path / name, spec)
        _all(source)
    return str(info.value)


def test_nan_is_reported_with_its_sample(tmp_path):
    data = np.zeros((10, 3, 4, 4), np.float32)
    data[6, 1, 2, 3] = np.nan
    np.save(tmp_path / "nan.npy", data)
    assert "sample 6 contains NaN or Inf" in _error(tmp_path, "nan.npy")


def test_shape_dtype_empty_missing_and_non_arrays_are_errors(tmp_path):
    np.save(tmp_path / "shape.npy", np.zeros((4, 3, 5, 4), np.float32))
    np.save(tmp_path / "rank.npy", np.zeros((4, 3), np.float32))
    np.save(tmp_path / "dtype.npy", np.array([["a"] * 48] * 2).reshape(2, 3, 4, 4))
    np.save(tmp_path / "empty.npy", np.zeros((0, 3, 4, 4), np.float32))
    np.savez(tmp_path / "keys.npz", y=np.zeros((2, 2), np.float32))
    (tmp_path / "text.npy").write_text("this is not an array")
    assert "does not match the model's (?, 3, 4, 4) on axis 2" in _error(tmp_path, "shape.npy")
    assert "model expects rank 4" in _error(tmp_path, "rank.npy")
    assert "is not numeric" in _error(tmp_path, "dtype.npy")
    assert "empty" in _error(tmp_path, "empty.npy")
    assert "no array for model input(s) a, b; keys present: y" in _error(tmp_path, "keys.npz", TWO)
    assert "not a numpy array file" in _error(tmp_path, "text.npy")
    assert "holds one array but the model has 2 inputs" in _error(tmp_path, "shape.npy", TWO)


def test_float_data_for_an_integer_input_is_an_error(tmp_path):
    np.save(tmp_path / "f.npy", np.zeros((3, 5), np.float32))
    spec = [InputSpec("ids", (None, 5), np.dtype(np.int64))]
    assert "data dtype float32 does not match the model's int64" in _error(tmp_path, "f.npy", spec)


def test_input_files_are_not_modified(tmp_path):
    np.save(tmp_path / "c.npy", np.ones((5, 3, 4, 4), np.float32))
    before = (tmp_path / "c.npy").read_bytes()
    _all(open_calibration(tmp_path / "c.npy", SPEC))
    assert (tmp_path / "c.npy").read_bytes() == before


STATEFUL = [
    InputSpec("x", (None, 6), np.dtype(np.float32)),
    InputSpec("state", (2, None, 4), np.dtype(np.float32)),  # batch on axis 1, as Silero VAD's
    InputSpec("rate", (), np.dtype(np.int64)),
]


def _stateful_feeds(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [
        {
            "x": rng.normal(size=(i + 1, 6)).astype(np.float32),
            "state": rng.normal(size=(2, i + 1, 4)).astype(np.float32),
            "rate": np.array(16000),
        }
        for i in range(n)
    ]


def test_whole_feeds_in_an_npz_are_read_back_feed_by_feed(tmp_path):
    feeds = _stateful_feeds(3)
    save_feeds(tmp_path / "feeds.npz", feeds)
    source = open_calibration(tmp_path / "feeds.npz", STATEFUL)
    assert source.num_samples == 3 and source.prebatched
    for want, got in zip(feeds, source.batches(0, 3, 32)):
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    assert [f.keys() for f in load_feeds(tmp_path / "feeds.npz")] == [f.keys() for f in feeds]


def test_a_feed_archive_with_a_gap_a_missing_input_or_a_wrong_rank_is_an_error(tmp_path):
    feeds = _stateful_feeds(3)
    save_feeds(tmp_path / "gap.npz", [feeds[0], {}, feeds[2]])
    save_feeds(tmp_path / "missing.npz", [feeds[0], {"x": feeds[1]["x"]}])
    save_feeds(tmp_path / "rank.npz", [{**feeds[0], "rate": np.array([16000])}])
    assert "not numbered 0 to 1 without a gap" in _error(tmp_path, "gap.npz", STATEFUL)
    assert "feed 1 has no array for model input(s) state, rate" in _error(
        tmp_path, "missing.npz", STATEFUL
    )
    assert "input 'rate': data has shape (1,), the model expects rank 0 ()" in _error(
        tmp_path, "rank.npz", STATEFUL
    )
    np.savez(tmp_path / "objects.npz", **{"0/x": np.array([{}], object)})
    assert "member 0/x is not a numeric array" in _error(tmp_path, "objects.npz", STATEFUL[:1])
