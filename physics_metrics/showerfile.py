"""Shower files in the 3DGAN HDF5 layout: `ECAL` (N, 25, 25, 25) [x, y, layer] in GeV and the
primary energy in `target[:, 1]` (GeV) or, in some files, `energy`."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import h5py
import numpy as np

from onnxio import InputError, atomic_path

SHAPE = (25, 25, 25)


class Showers(Protocol):
    """Anything the comparison can stream: a shower file, or showers generated chunk by chunk."""

    def chunks(self, size: int = 500) -> Iterator[tuple[np.ndarray, np.ndarray]]: ...


@dataclass
class ShowerFile:
    """An open shower file: `ecal` is the HDF5 dataset (read lazily), `energies` the primaries."""

    path: Path
    ecal: h5py.Dataset
    energies: np.ndarray

    def __len__(self) -> int:
        return len(self.energies)

    def chunks(self, size: int = 500) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(showers, energies) in chunks of `size`, read from disk one chunk at a time."""
        for start in range(0, len(self), size):
            yield (
                self.ecal[start : start + size].astype(np.float32),
                self.energies[start : start + size],
            )


def open_showers(path) -> ShowerFile:
    """Open and check a shower file; any problem is a one-line InputError naming the file."""
    path = Path(path)
    try:
        handle = h5py.File(path, "r")
    except (OSError, FileNotFoundError) as exc:
        raise InputError(
            path, f"not a readable HDF5 shower file ({str(exc).splitlines()[0]})"
        ) from None
    if "ECAL" not in handle:
        raise InputError(
            path, f"no dataset 'ECAL'; datasets present: {', '.join(handle.keys()) or 'none'}"
        )
    ecal = handle["ECAL"]
    if ecal.ndim != 4 or tuple(ecal.shape[1:]) != SHAPE:
        raise InputError(path, f"'ECAL' has shape {ecal.shape}, expected (N, 25, 25, 25)")
    if "target" in handle and handle["target"].ndim == 2 and handle["target"].shape[1] >= 2:
        energies = handle["target"][:, 1]
    elif "energy" in handle:
        energies = handle["energy"][:].reshape(-1)
    else:
        raise InputError(path, "no primary energy: expected 'target' (N, 2) or 'energy' (N,)")
    energies = np.asarray(energies, np.float64)
    if len(energies) != len(ecal):
        raise InputError(path, f"{len(ecal)} showers but {len(energies)} energies")
    bad = ~np.isfinite(energies) | (energies <= 0)
    if bad.any():
        raise InputError(
            path,
            f"primary energy of shower {int(np.argmax(bad))} is {energies[bad][0]}: must be a positive number",
        )
    return ShowerFile(path, ecal, energies)


def shower_datasets(f: h5py.File, energies: np.ndarray) -> h5py.Dataset:
    """The 3DGAN layout in an open file: `target` ([:, 0] = 11, an electron; [:, 1] = Ep GeV) and
    `energy` written, `ECAL` (N, 25, 25, 25) created in chunks of 250 showers and returned to fill."""
    f["target"] = np.stack([np.full(len(energies), 11.0), energies], axis=1)
    f["energy"] = energies
    return f.create_dataset(
        "ECAL",
        (len(energies), *SHAPE),
        np.float32,
        chunks=(min(250, max(len(energies), 1)), *SHAPE),
        compression="lzf",
    )


def write_shower_file(path, ecal: np.ndarray, energies: np.ndarray) -> Path:
    """Showers (N, 25, 25, 25) GeV into `path` in the 3DGAN layout, atomically."""
    path = Path(path)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        shower_datasets(f, energies)[:] = ecal
    return path
