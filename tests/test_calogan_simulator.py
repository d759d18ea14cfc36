"""The shower simulator against the published facts (REFERENCE sections 2-3), and its files."""

import re

import h5py
import numpy as np
import pytest

from models.calogan import detector
from models.calogan.showers import write_showers
from models.calogan.simulate import geometry, simulate
from onnxio import InputError
from physics_metrics.showerfile import open_showers


@pytest.fixture(scope="module")
def by_energy():
    geo, rng = geometry(), np.random.default_rng(0)
    return {e: simulate(np.full(150, float(e)), rng, geo) for e in (10, 50, 100, 200, 500)}


def test_detector_matches_the_published_stack():
    layers = detector.layers()
    assert len(layers) == 25
    assert layers[0].end_x0 == pytest.approx(0.61, abs=0.02)  # thin layer
    assert layers[-1].end_x0 - layers[-1].start_x0 == pytest.approx(1.22, abs=0.03)  # thick layer
    assert detector.effective_medium().e_hat == pytest.approx(0.70, abs=0.03)


def test_sampling_fraction_follows_the_3dgan_fit_within_10_percent(by_energy):
    for energy, showers in by_energy.items():
        measured = showers.sum(axis=(1, 2, 3)).mean() / energy
        assert measured == pytest.approx(detector.sampling_fraction_fit(energy), rel=0.10), energy


def test_shower_maximum_deepens_as_log_energy(by_energy):
    centres = 0.5 * (detector.layer_edges_x0()[:-1] + detector.layer_edges_x0()[1:])
    energies = np.array(sorted(by_energy))
    depth = []
    for e in energies:
        profile = by_energy[e].sum(axis=(0, 1, 2))
        depth.append(np.sum(profile * centres) / profile.sum())
    slope, _ = np.polyfit(np.log(energies), depth, 1)
    assert slope > 0.5  # X0 per e-fold of energy
    assert np.corrcoef(np.log(energies), depth)[0, 1] > 0.99


def test_about_90_percent_of_the_energy_lies_within_one_moliere_radius(by_energy):
    centres = (np.arange(detector.CELLS) - detector.CELLS / 2 + 0.5) * detector.CELL_MM
    xy = by_energy[100].sum(axis=3)
    total = xy.sum(axis=(1, 2))
    bx = (xy.sum(axis=2) * centres).sum(axis=1) / total
    by = (xy.sum(axis=1) * centres).sum(axis=1) / total
    r = np.hypot(
        centres[None, :, None] - bx[:, None, None], centres[None, None, :] - by[:, None, None]
    )
    inside = (xy * (r < detector.effective_medium().moliere_mm)).sum(axis=(1, 2)) / total
    assert 0.85 < inside.mean() < 0.95


def test_files_have_the_3dgan_layout_and_a_seed_fixes_them(tmp_path):
    a = write_showers(tmp_path / "a.h5", 40, seed=3, energy_range=(10, 100), workers=2)
    b = write_showers(tmp_path / "b.h5", 40, seed=3, energy_range=(10, 100), workers=1)
    with h5py.File(a) as f, h5py.File(b) as g:
        assert f["ECAL"].shape == (40, 25, 25, 25) and f["ECAL"].dtype == np.float32
        np.testing.assert_array_equal(f["ECAL"][:], g["ECAL"][:])
        np.testing.assert_array_equal(f["target"][:, 1], f["energy"][:])
    showers = open_showers(a)
    assert len(showers) == 40 and 10 <= showers.energies.min() and showers.energies.max() <= 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.h5", "b.h5"]


def _file(path, **datasets):
    with h5py.File(path, "w") as f:
        for name, data in datasets.items():
            f[name] = data
    return path


def test_real_files_with_only_an_energy_dataset_are_read(tmp_path):
    path = _file(
        tmp_path / "real.h5",
        ECAL=np.zeros((3, 25, 25, 25), np.float32),
        energy=np.array([[10.0], [20.0], [30.0]]),
    )
    assert list(open_showers(path).energies) == [10.0, 20.0, 30.0]


@pytest.mark.parametrize(
    "datasets, message",
    [
        ({"ECAL": np.zeros((2, 25, 25, 20))}, "expected (N, 25, 25, 25)"),
        ({"energy": np.ones(2)}, "no dataset 'ECAL'"),
        ({"ECAL": np.zeros((2, 25, 25, 25))}, "no primary energy"),
        ({"ECAL": np.zeros((2, 25, 25, 25)), "energy": np.array([5.0, -1.0])}, "shower 1 is -1.0"),
        ({"ECAL": np.zeros((2, 25, 25, 25)), "energy": np.array([np.nan, 1.0])}, "shower 0 is nan"),
        ({"ECAL": np.zeros((2, 25, 25, 25)), "energy": np.ones(3)}, "2 showers but 3 energies"),
    ],
)
def test_bad_shower_files_are_clear_errors(tmp_path, datasets, message):
    path = _file(tmp_path / "bad.h5", **datasets)
    with pytest.raises(InputError, match=re.escape(message)) as info:
        open_showers(path)
    assert "bad.h5" in str(info.value)
