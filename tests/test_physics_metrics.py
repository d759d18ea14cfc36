"""Physics metrics on simulated showers: zero for identical files, alarms for real differences."""

import subprocess
import sys

import h5py
import numpy as np
import pytest

from models.calogan.showers import write_showers
from physics_metrics import compare, open_showers
from physics_metrics.compare import extrapolated_separation, separation_power


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("showers")
    a = write_showers(root / "a.h5", 600, seed=1, energy_range=(95, 105), workers=2)
    b = write_showers(root / "b.h5", 600, seed=2, energy_range=(95, 105), workers=2)
    return root, a, b


def _modified(root, source, name, change):
    with h5py.File(source) as f:
        ecal, target, energy = f["ECAL"][:], f["target"][:], f["energy"][:]
    path = root / name
    with h5py.File(path, "w") as f:
        f["ECAL"], f["target"], f["energy"] = change(ecal), target, energy
    return path


def test_separation_power_bounds():
    h = np.array([1.0, 2.0, 3.0])
    assert separation_power(h, 2 * h) == 0.0
    assert separation_power(np.array([1.0, 0.0]), np.array([0.0, 5.0])) == pytest.approx(1.0)


def test_extrapolation_to_infinite_n_removes_the_jitter_but_keeps_a_real_shift():
    rng = np.random.default_rng(0)
    x, edges = rng.normal(size=4000), np.linspace(-4, 4, 161)
    odd = np.arange(len(x)) % 2 == 1

    def halves(values):
        return np.stack([np.histogram(values[odd == h], edges)[0] for h in (False, True)])

    jittered, shifted = x + rng.normal(scale=0.05, size=len(x)), x + 0.3
    assert (
        separation_power(halves(x).sum(0), halves(jittered).sum(0)) > 0.01
    )  # the same distribution reads 0.01+
    assert abs(extrapolated_separation(halves(x), halves(jittered))) < 0.003
    # A 0.3 sigma shift of a Gaussian separates by 0.3**2 / 4 = 0.0225 (S ~ mu^2 / 4 sigma^2); the
    # histograms of 4000 samples read more, the extrapolation finds it.
    assert separation_power(halves(x).sum(0), halves(shifted).sum(0)) > 0.03
    assert extrapolated_separation(halves(x), halves(shifted)) == pytest.approx(0.0225, abs=0.005)


def test_a_file_against_itself_is_identical(files):
    _, a, _ = files
    result = compare(open_showers(a), open_showers(a), centres=(100,))
    assert result.max_separation and max(result.max_separation.values()) == 0.0
    assert result.bins[0]["sampling_fraction_shift"] == 0.0 and result.combined_3dgan == 0.0


def test_two_samples_of_the_same_physics_are_close(files):
    _, a, b = files
    result = compare(open_showers(a), open_showers(b), centres=(100,))
    assert result.bins[0]["showers_reference"] == 600
    assert abs(result.bins[0]["sampling_fraction_shift"]) < 0.01
    assert max(result.max_separation.values()) < 0.1, result.max_separation


def test_energy_scale_and_depth_shifts_are_caught(files):
    root, a, _ = files
    slightly = _modified(root, a, "slightly.h5", lambda e: e * 1.05)
    scaled = _modified(root, a, "scaled.h5", lambda e: e * 1.2)
    deeper = _modified(
        root, a, "deeper.h5", lambda e: np.roll(e, 3, axis=3)
    )  # about 2 sigma of shower depth
    assert compare(open_showers(a), open_showers(slightly), centres=(100,)).bins[0][
        "sampling_fraction_shift"
    ] == pytest.approx(0.05, abs=1e-6)
    by_scale = compare(open_showers(a), open_showers(scaled), centres=(100,))
    assert by_scale.max_separation["sampling_fraction"] > 0.8  # 20 % against a 6 % resolution
    by_depth = compare(open_showers(a), open_showers(deeper), centres=(100,))
    assert by_depth.max_separation["m1_z"] > 0.3 and by_depth.max_separation["profile_z"] > 0.05
    assert by_depth.max_separation["m1_x"] == 0.0


def test_every_shower_is_counted_and_a_diffuse_shower_is_caught(files):
    root, a, _ = files
    # 60 % more energy spread evenly over the cells: m2_x near 30 cells^2 instead of 1.
    diffuse = _modified(
        root, a, "diffuse.h5", lambda e: e + e.sum(axis=(1, 2, 3), keepdims=True) * 0.6 / e[0].size
    )
    result = compare(open_showers(a), open_showers(diffuse), centres=(100,))
    counted = {
        name: sum(h["generated"])
        for name, h in result.bins[0]["histograms"].items()
        if name != "cell_log10_energy"
    }
    assert set(counted.values()) == {600}, counted
    assert result.max_separation["m2_x"] > 0.9 and result.max_separation["m2_y"] > 0.9


def test_chunking_does_not_change_the_result(files):
    _, a, b = files
    whole = compare(open_showers(a), open_showers(b), centres=(100,), chunk=1000)
    pieces = compare(open_showers(a), open_showers(b), centres=(100,), chunk=7)
    assert whole.max_separation == pytest.approx(
        pieces.max_separation, rel=1e-4, abs=1e-9
    )  # float32 summation order
    assert whole.max_separation_infinite_n == pytest.approx(
        pieces.max_separation_infinite_n, rel=1e-4, abs=1e-9
    )


def test_cli_reports_and_rejects_bad_files(files, tmp_path):
    _, a, b = files
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "physics_metrics",
            str(a),
            str(b),
            "--bins",
            "100",
            "--json",
            str(tmp_path / "m.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert (
        run.returncode == 0
        and "3DGAN combined metric" in run.stdout
        and (tmp_path / "m.json").exists()
    )
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    run = subprocess.run(
        [sys.executable, "-m", "physics_metrics", str(a), str(tmp_path / "junk.h5")],
        capture_output=True,
        text=True,
    )
    assert (
        run.returncode == 2
        and "junk.h5: not a readable HDF5" in run.stderr
        and "Traceback" not in run.stderr
    )


def test_physics_report_compares_every_candidate_with_the_reference_and_the_baseline(files):
    from physics_metrics.report import compact, physics_html, physics_report

    root, a, b = files
    doubled = _modified(root, a, "doubled_report.h5", lambda e: 2 * e)
    report = physics_report(
        open_showers(b),
        {"FP32": open_showers(a), "INT8": open_showers(a), "bad": open_showers(doubled)},
        baseline="FP32",
        bins=(100,),
    )
    assert set(report["vs_reference"]) == {"FP32", "INT8", "bad"} and set(
        report["vs_baseline"]
    ) == {"INT8", "bad"}
    assert max(report["vs_baseline"]["INT8"]["max_separation"].values()) == 0.0  # identical showers
    assert report["vs_baseline"]["bad"]["bins"][0]["sampling_fraction_shift"] == pytest.approx(1.0)
    page = physics_html(report)
    assert (
        page.count("<img src='data:image/png;base64,") == 5
        and "Against FP32 on the same latents" in page
    )
    assert "histograms" not in str(compact(report)) and "histograms" in str(report)
