"""Jobs too large for one run: the work cut into shards of a fixed size, each written atomically
by whichever stream ran it (a StreamPool here, a RayPool across machines), and a manifest.

The folder's `job.json` says what the job is; rerunning the same job skips every shard already
on disk (a shard file exists only once complete: it is renamed into place), so a job killed at
any point resumes where it stopped, never rewrites a finished shard and removes the partial
files of the shards it was writing. A different job into the same folder is refused.
`manifest.json`, written when the last shard is done, lists every shard with its item range,
size and SHA-256.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from onnxio import InputError, atomic_path, write_text
from quantize.batcher import Progress, quiet

JOB_FILE, MANIFEST_FILE = "job.json", "manifest.json"


@dataclass(frozen=True)
class Shard:
    index: int
    first: int  # first item
    stop: int  # one past the last item

    def __len__(self) -> int:
        return self.stop - self.first


def plan_shards(items: int, shard_size: int) -> list[Shard]:
    if items < 1 or shard_size < 1:
        raise ValueError(f"{items} items in shards of {shard_size}: both must be at least 1")
    starts = range(0, items, shard_size)
    return [Shard(i, first, min(first + shard_size, items)) for i, first in enumerate(starts)]


WriteShard = Callable[[Shard, Path], None]  # writes one shard's content to the given file


@dataclass(frozen=True)
class ShardedJob:
    """`spec` (JSON-able) names the job; its shards are files `<stem>-<first>-<stop><suffix>`."""

    folder: Path
    spec: dict
    items: int
    shard_size: int
    stem: str = "shard"
    suffix: str = ".h5"

    @property
    def shards(self) -> list[Shard]:
        return plan_shards(self.items, self.shard_size)

    def path(self, shard: Shard) -> Path:
        return self.folder / f"{self.stem}-{shard.first:010d}-{shard.stop:010d}{self.suffix}"

    def open(self) -> list[Shard]:
        """Create the folder or check that it holds this job; the shards still to do."""
        job = {**self.spec, "items": self.items, "shard_size": self.shard_size}
        self.folder.mkdir(parents=True, exist_ok=True)
        job_file = self.folder / JOB_FILE
        if job_file.exists():
            try:
                held = json.loads(job_file.read_text())
            except ValueError as exc:
                raise InputError(job_file, f"not a job description ({exc})") from None
            if held != job:
                changed = sorted(k for k in job.keys() | held.keys() if job.get(k) != held.get(k))
                raise InputError(
                    job_file,
                    f"this folder holds another job (differs in {', '.join(changed)}): "
                    "rerun that job to resume it, or write to a new folder",
                )
        else:
            write_text(job_file, json.dumps(job, indent=2))
        # what a killed run was writing: atomic_path's temporary files, `.<shard file>.*.tmp`
        for partial in self.folder.glob(f".{self.stem}-*{self.suffix}.*.tmp"):
            partial.unlink()
        return [s for s in self.shards if not self.path(s).exists()]

    def runner(self, make_writer: Callable[[int], WriteShard]) -> Callable[[int], Callable]:
        """A batcher runner factory (StreamPool or RayPool): each request is a Shard, written
        atomically to its file by `make_writer(threads)`; the result is its file name."""
        paths = self.path

        def make_runner(threads: int):
            write = make_writer(threads)

            def run(shards: list[Shard]) -> list[str]:
                for shard in shards:
                    try:
                        with atomic_path(paths(shard)) as tmp:
                            write(shard, tmp)
                    except Exception as exc:
                        raise RuntimeError(
                            f"{paths(shard).name} (items {shard.first} to {shard.stop - 1}): "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
                return [paths(shard).name for shard in shards]

            return run

        return make_runner

    def finish(self) -> dict:
        """Write the manifest of a job whose shards are all on disk; returns it."""
        missing = [s for s in self.shards if not self.path(s).exists()]
        if missing:
            raise RuntimeError(
                f"{len(missing)} shards of {self.folder} are missing, first {missing[0]}"
            )
        manifest = {
            "job": {**self.spec, "items": self.items, "shard_size": self.shard_size},
            "shards": [
                {
                    "file": self.path(s).name,
                    "first": s.first,
                    "stop": s.stop,
                    "bytes": self.path(s).stat().st_size,
                    "sha256": _sha256(self.path(s)),
                }
                for s in self.shards
            ],
        }
        write_text(self.folder / MANIFEST_FILE, json.dumps(manifest, indent=2))
        return manifest


def run_job(
    job: ShardedJob,
    make_writer: Callable[[int], WriteShard],
    pool_factory,
    progress: Progress = quiet,
):
    """Run the shards of `job` not yet on disk on the pool `pool_factory(make_runner)` makes
    (not made when nothing is left), then write the manifest. Returns (the shards run now,
    the manifest)."""
    todo = job.open()
    if todo:
        with pool_factory(job.runner(make_writer)) as pool:
            pool.run(todo, [[i] for i in range(len(todo))], progress)
    return todo, job.finish()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
