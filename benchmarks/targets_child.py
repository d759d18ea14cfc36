"""`python -m benchmarks.targets_child TEST.npz MODEL.onnx...`: top-1 of each model with ORT's
default kernels, as JSON on stdout. benchmarks.targets runs it under AVX2 emulation."""

import json
import sys

import numpy as np

from quantize.runtime import run_batches, session
from quantize.target import host_isa


def main() -> None:
    with np.load(sys.argv[1]) as test:
        images, labels = test["image"], test["label"]
    top1 = []
    for path in sys.argv[2:]:
        sess = session(path, exact_kernels=False)
        logits = run_batches(sess, {sess.get_inputs()[0].name: images}, 100)[0]
        top1.append(100 * float(np.mean(logits.argmax(axis=1) == labels)))
    print(json.dumps({"isa": host_isa(), "top1": top1}))


if __name__ == "__main__":
    main()
