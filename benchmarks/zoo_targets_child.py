"""`python -m benchmarks.zoo_targets_child INT8.onnx FEEDS.npz OUT.npz`: the model's outputs on
each feed in FEEDS (`calibration.save_feeds`), written to OUT the same way (each output under its
number), and this CPU's INT8 path as JSON on stdout. benchmarks.zoo_targets runs it under AVX2
emulation."""

import json
import sys
from pathlib import Path

from calibration import load_feeds, save_feeds
from quantize.runtime import session
from quantize.target import host_isa


def main() -> None:
    model, feeds, out = map(Path, sys.argv[1:4])
    sess = session(model)
    outputs = []
    for index, feed in enumerate(load_feeds(feeds)):
        outputs.append({str(j): array for j, array in enumerate(sess.run(None, feed))})
        print(f"{model.name}: feed {index + 1}", file=sys.stderr, flush=True)
    save_feeds(out, outputs)
    print(json.dumps({"isa": host_isa()}))


if __name__ == "__main__":
    main()
