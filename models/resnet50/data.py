"""Fashion-MNIST from the Debian package, upscaled to RGB at the model's resolution.

The preprocessing recipe is stored in the exported ONNX model's metadata, so the quantizer's
image-directory reader applies exactly what training applied.
"""

import gzip
from pathlib import Path

import numpy as np

from onnxio import InputError

DATASET_DIR = Path("/usr/share/datasets/fashion-mnist")
# Pixel statistics of the Fashion-MNIST training images, in [0, 1].
MEAN, STD = 0.2860, 0.3530
PREPROCESS = {
    "layout": "NHWC",
    "color": "RGB",
    "scale": 1 / 255,
    "mean": [MEAN] * 3,
    "std": [STD] * 3,
}


def _read_idx(path: Path) -> np.ndarray:
    if not path.exists():
        raise InputError(path, "missing: install the Debian package dataset-fashion-mnist")
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(split: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 28, 28) and int labels (N,) of 'train' (60k) or 'test' (10k)."""
    prefix = {"train": "train", "test": "t10k"}[split]
    images = _read_idx(DATASET_DIR / f"{prefix}-images-idx3-ubyte.gz")
    labels = _read_idx(DATASET_DIR / f"{prefix}-labels-idx1-ubyte.gz")
    return images, labels.astype(np.int64)


def to_rgb(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 (N, 28, 28) -> uint8 (N, size, size, 3), bilinear upscaling."""
    from PIL import Image

    out = np.empty((len(images), size, size, 3), np.uint8)
    for i, img in enumerate(images):
        out[i] = np.asarray(Image.fromarray(img).resize((size, size), Image.BILINEAR))[..., None]
    return out


def normalise(rgb: np.ndarray) -> np.ndarray:
    """uint8 RGB -> float32 model input, the recipe in PREPROCESS."""
    return ((rgb.astype(np.float32) / 255.0 - MEAN) / STD).astype(np.float32)
