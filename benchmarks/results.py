"""Writing a benchmark's JSON and Markdown table into benchmarks/results/."""

import json
from pathlib import Path

from quantize.atomic import write_text

RESULTS = Path(__file__).parent / "results"


def write_results(name: str, data: dict, markdown: str) -> Path:
    RESULTS.mkdir(exist_ok=True)
    write_text(RESULTS / f"{name}.json", json.dumps(data, indent=2, default=float) + "\n")
    write_text(RESULTS / f"{name}.md", markdown)
    return RESULTS / f"{name}.json"
