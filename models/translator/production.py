"""Corpora too large for one run: a text file translated in shards of a fixed number of lines
(quantize/shards.py) on this machine's streams or a Ray cluster (quantize/ray_pool.py), then
joined in input order.

The driver reads the file once (checking that every line is UTF-8) and hands each stream only
the byte range of its shard; a stream packs its shard's lines by length under the token budget,
as the local batcher does, and writes the shard's German lines. The input file, the translator
and the output folder must be on a filesystem every node sees.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

from models.translator.translate import Translator, TranslatorFiles
from onnxio import atomic_path
from quantize.batcher import pack
from quantize.shards import Shard, ShardedJob, plan_shards

SHARD_LINES = 10000


@dataclass(frozen=True)
class CorpusJob:
    """Translate the lines of `source` with the translator in `files`."""

    source: str
    files: TranslatorFiles
    beam: int
    token_budget: int
    line_starts: tuple[int, ...]  # byte offset of every shard's first line, then the file's end
    lines: int
    shard_size: int = SHARD_LINES

    @classmethod
    def of(cls, source: Path, lines: int, files, beam, token_budget, shard_size=SHARD_LINES):
        """The job for `source`, whose `lines` lines read_lines has already checked."""
        raw = Path(source).read_bytes()
        offsets = [0]
        for piece in raw.split(b"\n")[:lines]:
            offsets.append(offsets[-1] + len(piece) + 1)
        starts = [offsets[s.first] for s in plan_shards(lines, shard_size)]
        return cls(str(source), files, beam, token_budget, (*starts, len(raw)), lines, shard_size)

    def make_writer(self, threads: int):
        translator = Translator(self.files, threads, self.beam)

        def write(shard: Shard, path: Path) -> None:
            with open(self.source, "rb") as f:
                f.seek(self.line_starts[shard.index])
                raw = f.read(self.line_starts[shard.index + 1] - self.line_starts[shard.index])
            lines = [line.rstrip("\r") for line in raw.decode("utf-8").split("\n")[: len(shard)]]
            out = [""] * len(lines)
            for batch in pack(translator.token_lengths(lines), self.token_budget, 128):
                for i, german in zip(batch, translator([lines[i] for i in batch])):
                    out[i] = german
            path.write_text("".join(f"{line}\n" for line in out), encoding="utf-8")

        return write

    def sharded(self, folder: Path) -> ShardedJob:
        spec = {
            "source_sha256": hashlib.sha256(Path(self.source).read_bytes()).hexdigest(),
            "translator_sha256": _sha256(self.files.encoder, self.files.decoder),
            "beam": self.beam,
            "token_budget": self.token_budget,
        }
        return ShardedJob(Path(folder), spec, self.lines, self.shard_size, "lines", suffix=".txt")

    def join(self, job: ShardedJob, output: Path) -> None:
        """The shards' lines into `output`, in input order, atomically."""
        with atomic_path(output) as tmp, open(tmp, "wb") as out:
            for shard in job.shards:
                out.write(job.path(shard).read_bytes())


def _sha256(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()
