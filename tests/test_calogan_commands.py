"""The 3DGAN study from the command line: train a tiny generator, quantize it by energy range,
generate showers in FP32 and INT8, compare them with the physics metrics; bad input is refused."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import tensorflow  # noqa: F401  (a required dependency: missing, it fails the suite)


def _run(module: str, *args, cache=None):
    env = dict(os.environ, QUANTIZE_CACHE=str(cache)) if cache else None
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, env=env
    )


def test_train_quantize_generate_compare(tmp_path):
    cache = tmp_path / "cache"
    assert (
        _run(
            "models.calogan",
            "train",
            "--showers",
            "2",
            "--batch",
            "2",
            "--epochs",
            "1",
            cache=cache,
        ).returncode
        == 0
    )
    assert _run("models.calogan", "quantize", "--samples", "10", cache=cache).returncode == 2
    run = _run("models.calogan", "quantize", "--ranges", "2", "--samples", "64", cache=cache)
    assert run.returncode == 0, run.stderr
    manifest = json.loads((cache / "calogan" / "int8" / "ranges.json").read_text())
    assert manifest["edges_gev"] == pytest.approx([10.0, 500**0.5 * 10**0.5, 500.0])
    checks = manifest["speed_checks"]  # timed here: INT8 kept, or FP32 with a warning
    assert len(checks) == 2 and all("x the FP32 graph's speed" in c for c in checks)
    assert run.stderr.count("models.calogan: warning: ") == sum(
        c.endswith("stays FP32") for c in checks
    )
    for flags, name in (([], "fp32.h5"), (["--int8", cache / "calogan" / "int8"], "int8.h5")):
        run = _run(
            "models.calogan",
            "generate",
            "-o",
            tmp_path / name,
            "--showers",
            "40",
            "--energy",
            "90",
            "110",
            *flags,
            cache=cache,
        )
        assert run.returncode == 0, run.stderr
    with h5py.File(tmp_path / "int8.h5") as f:
        assert f["ECAL"].shape == (40, 25, 25, 25) and np.all(
            (f["energy"][:] >= 90) & (f["energy"][:] <= 110)
        )
        assert np.all(f["target"][:, 1] == f["energy"][:])
    sharded = ["models.calogan", "generate", "-o", tmp_path / "shards", "--int8"]
    sharded += [cache / "calogan" / "int8", "--energy", "90", "110", "--shard-size", "16"]
    run = _run(*sharded, "--showers", "40", "--ray", cache=cache)  # a Ray started here
    assert run.returncode == 0 and "3 written now" in run.stdout, run.stderr
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert [(s["first"], s["stop"]) for s in manifest["shards"]] == [(0, 16), (16, 32), (32, 40)]
    run = _run(*sharded, "--showers", "40", cache=cache)  # resumed on local streams: all done
    assert run.returncode == 0 and "0 written now" in run.stdout and "3 were already" in run.stdout
    run = _run(*sharded, "--showers", "50", cache=cache)
    assert run.returncode == 2 and "job.json: this folder holds another job" in run.stderr
    assert "Traceback" not in run.stderr
    run = _run(
        "physics_metrics",
        tmp_path / "fp32.h5",
        tmp_path / "int8.h5",
        "--bins",
        "100",
        "--half-width",
        "10",
    )
    assert run.returncode == 0 and "3DGAN combined metric" in run.stdout


def test_generate_refuses_energies_outside_the_trained_range(tmp_path):
    run = _run(
        "models.calogan",
        "generate",
        "-o",
        tmp_path / "x.h5",
        "--energy",
        "1",
        "600",
        cache=tmp_path,
    )
    assert run.returncode == 2 and "trained range" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "x.h5").exists()


def test_a_broken_int8_folder_is_one_clear_error(tmp_path):
    folder = tmp_path / "int8"
    folder.mkdir()
    (folder / "ranges.json").write_text(json.dumps({"edges_gev": [10, 5], "models": ["a.onnx"]}))
    run = _run(
        "models.calogan", "generate", "-o", tmp_path / "x.h5", "--int8", folder, cache=tmp_path
    )
    assert (
        run.returncode == 2
        and "increasing energy edges" in run.stderr
        and "Traceback" not in run.stderr
    )
