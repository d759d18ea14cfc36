"""Showers at production scale: a generation job cut into shards of a fixed number of showers
(quantize/shards.py), run on this machine's streams or on a Ray cluster (quantize/ray_pool.py).

A shower's inputs depend only on the seed and its shard (primary energies and latents drawn
from `default_rng([seed, shard])`), never on which stream or node made it, so the shards of a
job are the same files wherever they ran, and one file of N showers (`write_file`) holds
exactly the union of the job's shards. Streams read the generator from its path: on a real
cluster the model and the output folder must be on a filesystem every node sees.
"""

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np

from models.calogan.generate import EnergyRangeModels, latents, onnx_source
from physics_metrics.showerfile import shower_datasets, write_shower_file
from quantize.frontend.onnx_file import load_onnx
from quantize.shards import Shard, ShardedJob, plan_shards

SHARD_SIZE = 1000  # showers per shard: 62 MB raw, a few MB compressed


@dataclass(frozen=True)
class ShowerJob:
    """`showers` showers with primaries uniform in `energy` GeV from `model`: the FP32 generator
    (an .onnx file) or a folder of INT8 generators by energy range."""

    model: str
    showers: int
    energy: tuple[float, float]
    seed: int = 0
    shard_size: int = SHARD_SIZE

    @property
    def shards(self) -> list[Shard]:
        return plan_shards(self.showers, self.shard_size)

    def inputs(self, shard: Shard) -> tuple[np.ndarray, np.ndarray]:
        """(latents, primary energies GeV) of one shard."""
        rng = np.random.default_rng([self.seed, shard.index])
        energies = rng.uniform(*self.energy, len(shard))
        return latents(energies, seed=int(rng.integers(1 << 31))), energies

    def source(self, threads: int = 0):
        path = Path(self.model)
        if path.is_dir():
            return EnergyRangeModels.load(path).source(threads)
        return onnx_source(load_onnx(path), threads)

    def make_writer(self, threads: int):
        """A shard writer for one stream (see ShardedJob.runner)."""
        source = self.source(threads)

        def write(shard: Shard, path: Path) -> None:
            z, energies = self.inputs(shard)
            with h5py.File(path, "w") as f:
                shower_datasets(f, energies)[:] = source(z, energies)

        return write

    def sharded(self, folder: Path) -> ShardedJob:
        spec = {
            **asdict(self),
            "energy": list(self.energy),
            "model_sha256": _fingerprint(self.model),
        }
        del spec["showers"], spec["shard_size"]  # ShardedJob records them as items, shard_size
        return ShardedJob(Path(folder), spec, self.showers, self.shard_size, stem="showers")

    def write_file(self, path: Path) -> Path:
        """All showers of the job in one file, in this process."""
        source = self.source()
        inputs = [self.inputs(shard) for shard in self.shards]
        energies = np.concatenate([e for _, e in inputs])
        showers = np.concatenate([source(z, e) for z, e in inputs])
        return write_shower_file(path, showers, energies)


def _fingerprint(model: str) -> str:
    """SHA-256 over the generator's file(s): a resumed job must not mix two models."""
    path = Path(model)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + file.read_bytes())
    return digest.hexdigest()
