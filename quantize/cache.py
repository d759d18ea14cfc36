"""Where built artefacts (trained weights, exported models, data) are cached and reused."""

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """`$QUANTIZE_CACHE` (default ~/.cache/quantize), joined with `parts`, created on demand."""
    root = Path(os.environ.get("QUANTIZE_CACHE", Path.home() / ".cache" / "quantize"))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
