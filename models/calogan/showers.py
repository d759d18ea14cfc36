"""Shower files in the 3DGAN HDF5 layout: `ECAL` (N, 25, 25, 25) [x, y, layer] in GeV, the
primary energy in `target[:, 1]` (GeV) and, in some files, `energy`. Files written here carry
both, with target[:, 0] = 11 (the electron's PDG code), so real 3DGAN files and ours read alike.
"""

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from models.calogan import detector
from models.calogan.simulate import simulate
from quantize.errors import QuantizeError

SHAPE = (detector.CELLS,) * 3
CHUNK = 250


@dataclass
class ShowerFile:
    """An open shower file: `ecal` is the HDF5 dataset (read lazily), `energies` the primaries."""

    path: Path
    ecal: h5py.Dataset
    energies: np.ndarray

    def __len__(self) -> int:
        return len(self.energies)


def open_showers(path) -> ShowerFile:
    """Open and check a shower file; any problem is a one-line QuantizeError naming the file."""
    path = Path(path)
    try:
        handle = h5py.File(path, "r")
    except (OSError, FileNotFoundError) as exc:
        raise QuantizeError(path, f"not a readable HDF5 shower file ({str(exc).splitlines()[0]})") from None
    if "ECAL" not in handle:
        raise QuantizeError(path, f"no dataset 'ECAL'; datasets present: {', '.join(handle.keys()) or 'none'}")
    ecal = handle["ECAL"]
    if ecal.ndim != 4 or tuple(ecal.shape[1:]) != SHAPE:
        raise QuantizeError(path, f"'ECAL' has shape {ecal.shape}, expected (N, 25, 25, 25)")
    if "target" in handle and handle["target"].ndim == 2 and handle["target"].shape[1] >= 2:
        energies = handle["target"][:, 1]
    elif "energy" in handle:
        energies = handle["energy"][:].reshape(-1)
    else:
        raise QuantizeError(path, "no primary energy: expected 'target' (N, 2) or 'energy' (N,)")
    energies = np.asarray(energies, np.float64)
    if len(energies) != len(ecal):
        raise QuantizeError(path, f"{len(ecal)} showers but {len(energies)} energies")
    bad = ~np.isfinite(energies) | (energies <= 0)
    if bad.any():
        raise QuantizeError(path, f"primary energy of shower {int(np.argmax(bad))} is {energies[bad][0]}: must be a positive number")
    return ShowerFile(path, ecal, energies)


def write_showers(path, count: int, seed: int = 0, energy_range: tuple[float, float] = (2.0, 500.0), workers: int | None = None) -> Path:
    """Simulate `count` showers with energies uniform in `energy_range` (GeV) into `path`,
    atomically, in chunks across `workers` processes. The same seed gives the same file."""
    path = Path(path)
    energies = np.random.default_rng(seed).uniform(*energy_range, count)
    chunks = [(energies[i:i + CHUNK], seed, i) for i in range(0, count, CHUNK)]
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with h5py.File(tmp, "w") as f, ProcessPoolExecutor(workers or os.cpu_count()) as pool:
            ecal = f.create_dataset("ECAL", (count, *SHAPE), np.float32, chunks=(min(CHUNK, max(count, 1)), *SHAPE), compression="lzf")
            for (part, _, start), showers in zip(chunks, pool.map(_simulate_chunk, chunks)):
                ecal[start:start + len(part)] = showers
            f["target"] = np.stack([np.full(count, 11.0), energies], axis=1)
            f["energy"] = energies
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _simulate_chunk(job) -> np.ndarray:
    energies, seed, start = job
    return simulate(energies, np.random.default_rng([seed, start]))
