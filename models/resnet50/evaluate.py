"""Top-1 accuracy of an ONNX classifier on the cached Fashion-MNIST test images."""

from pathlib import Path

import numpy as np

from models.resnet50.build import test_images
from quantize.runtime import run_batches, session


def top1(
    model, images: np.ndarray, labels: np.ndarray, threads: int = 0, batch: int = 250
) -> float:
    sess = session(model, threads)
    logits = run_batches(sess, {sess.get_inputs()[0].name: images}, batch)[0]
    return float(np.mean(logits.argmax(axis=1) == labels))


def top1_of_file(model_path, test_npz: Path | None = None) -> float:
    return top1(Path(model_path), *test_images(path=test_npz))


class Top1Evaluator:
    """Top-1 on the 10k Fashion-MNIST test images, for `quantize --evaluate resnet50`."""

    name = "resnet50"
    metric = "top-1 %"
    higher_is_better = True

    def __init__(self, test_npz: Path | None = None):
        self.test_npz = test_npz

    def evaluate(self, model) -> float:
        return 100 * top1(model, *test_images(path=self.test_npz))
