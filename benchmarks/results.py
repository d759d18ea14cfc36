"""Writing a benchmark's JSON and Markdown table into benchmarks/results/, with its provenance."""

import datetime
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from onnxio import write_text
from quantize.target import host_isa, host_target

# `make bench-quick`: every benchmark end to end on small sizes, a check that it runs; its files go
# to results/quick/ (not committed), never over the committed results.
QUICK = os.environ.get("QUANTIZE_BENCH_QUICK") == "1"
RESULTS = Path(__file__).parent / "results" / ("quick" if QUICK else "")
VERSIONED = (
    "onnxruntime",
    "onnx",
    "onnx-ir",
    "numpy",
    "tensorflow-cpu",
    "keras",
    "tf2onnx",
    "ai-edge-litert",
    "openvino",
    "nncf",
    "ray",
)


def sized(full, quick):
    """`full`, or `quick` in a quick run."""
    return quick if QUICK else full


def shape_text(shapes: dict[str, list[int]]) -> str:
    """A record's input shapes as a table cell: 1x3x640x640, one per input."""
    return " ".join("x".join(map(str, shape)) for shape in shapes.values())


def for_this_cpu(name: str) -> str:
    """The name of a benchmark's files whose figures depend on the CPU's INT8 path: NAME_TARGET
    (avx2, vnni, amx), one file per target beside the others."""
    return f"{name}_{host_target()}"


def write_results(name: str, data: dict, markdown: str) -> Path:
    """`data` under the run's provenance (commit, dirty, date, isa, versions, command)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {**provenance(), **data}
    write_text(RESULTS / f"{name}.json", json.dumps(record, indent=2, default=float) + "\n")
    write_text(RESULTS / f"{name}.md", f"{markdown.rstrip()}\n\n{_provenance_line(record)}\n")
    return RESULTS / f"{name}.json"


def provenance() -> dict:
    root = Path(__file__).parents[1]

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True
        ).stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD") or "unknown",
        # results files written by earlier runs do not make the code dirty
        "dirty": bool(
            git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results")
        ),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "isa": host_isa(),
        "versions": {name: _version(name) for name in VERSIONED},
        "command": command(),
    }


def command() -> str:
    """The command that runs this process, as a user types it: `python -m benchmarks.zoo` for
    a package, whose __main__ module Python names benchmarks.zoo.__main__."""
    spec = sys.modules["__main__"].__spec__
    program = f"-m {spec.name.removesuffix('.__main__')}" if spec else sys.argv[0]
    return " ".join(["python", program, *sys.argv[1:]])


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _provenance_line(record: dict) -> str:
    isa = record["isa"]
    return (
        f"`{record['command']}` at {record['commit'][:10]}{' (dirty)' if record['dirty'] else ''}, {record['date']}; "
        f"{isa['cpu']}, INT8 path {isa['int8_gemm_path']}, ONNX Runtime {isa['onnxruntime']}."
    )
