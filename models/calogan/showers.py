"""Writing simulated showers in the 3DGAN HDF5 layout (see `physics_metrics.showerfile`), with
target[:, 0] = 11 (the electron's PDG code) and both `target` and `energy`, so real 3DGAN files
and ours read alike."""

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import h5py
import numpy as np

from models.calogan.simulate import simulate
from onnxio import atomic_path
from physics_metrics.showerfile import shower_datasets

CHUNK = 250


def write_showers(
    path,
    count: int,
    seed: int = 0,
    energy_range: tuple[float, float] = (2.0, 500.0),
    workers: int | None = None,
) -> Path:
    """Simulate `count` showers with energies uniform in `energy_range` (GeV) into `path`."""
    return write_showers_at(
        path, np.random.default_rng(seed).uniform(*energy_range, count), seed, workers
    )


def write_showers_at(path, energies: np.ndarray, seed: int = 0, workers: int | None = None) -> Path:
    """Simulate one shower per primary energy (GeV) into `path`, atomically, in chunks across
    `workers` processes. The same energies and seed give the same file."""
    path = Path(path)
    chunks = [(energies[i : i + CHUNK], seed, i) for i in range(0, len(energies), CHUNK)]
    with (
        atomic_path(path) as tmp,
        h5py.File(tmp, "w") as f,
        ProcessPoolExecutor(workers or os.cpu_count()) as pool,
    ):
        ecal = shower_datasets(f, energies)
        for (part, _, start), showers in zip(chunks, pool.map(_simulate_chunk, chunks)):
            ecal[start : start + len(part)] = showers
    return path


def _simulate_chunk(job) -> np.ndarray:
    energies, seed, start = job
    return simulate(energies, np.random.default_rng([seed, start]))
