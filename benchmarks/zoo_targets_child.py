"""`python -m benchmarks.zoo_targets_child INT8.onnx FEEDS.npz OUT.npz`: the model's outputs on
each feed in FEEDS (members INDEX/INPUT), written to OUT (members INDEX/OUTPUT NUMBER), and this
CPU's INT8 path as JSON on stdout. benchmarks.zoo_targets runs it under AVX2 emulation."""

import json
import sys
from pathlib import Path

import numpy as np

from quantize.runtime import session
from quantize.target import host_isa


def main() -> None:
    model, feeds_path, out = map(Path, sys.argv[1:4])
    archive = np.load(feeds_path)
    feeds: dict[int, dict[str, np.ndarray]] = {}
    for member in archive.files:
        index, name = member.split("/", 1)
        feeds.setdefault(int(index), {})[name] = archive[member]
    sess = session(model)
    outputs = {}
    for index, feed in sorted(feeds.items()):
        for j, array in enumerate(sess.run(None, feed)):
            outputs[f"{index}/{j}"] = array
        print(f"{model.name}: feed {index + 1}/{len(feeds)}", file=sys.stderr, flush=True)
    np.savez(out, **outputs)
    print(json.dumps({"isa": host_isa()}))


if __name__ == "__main__":
    main()
