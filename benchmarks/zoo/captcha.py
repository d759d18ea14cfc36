"""The captcha recogniser ddddocr ships (PyPI ddddocr; `common.onnx`, its "beta" model, exported by
torch.onnx from PyTorch 1.9 at opset 12): convolutions with SiLU, an LSTM and CTC over 8,210
characters, one image of height 64 a call. Inputs are captchas drawn with Debian's DejaVu fonts
(letters of assorted faces, sizes, heights and inks on a tinted ground crossed by lines), fed as
ddddocr feeds them (grey, x/255). The captchas' own texts are known, so the metric is the task's:
of the captchas FP32 reads right, the share INT8 reads right too."""

import ast
from functools import cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from benchmarks.zoo.ppocr import ctc_texts
from benchmarks.zoo.sources import fonts, wheel_member
from benchmarks.zoo.zoo_model import ZooModel

PACKAGE, VERSION = "ddddocr", "1.6.1"
MODEL, CHARSETS = "ddddocr/common.onnx", "ddddocr/charsets.py"
CANVAS = (150, 60)  # a common captcha size; ddddocr resizes to height 64 keeping the aspect
SERVED = (160, 64)
LETTERS = "abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/l/I look-alikes
TARGET = 0.97


def models() -> list[ZooModel]:
    return [
        ZooModel(
            "ddddocr captcha recogniser",
            "torch.onnx (PyTorch 1.9)",
            f"captchas FP32 reads right, INT8 reads right too: >= {TARGET:.0%}",
            lambda: wheel_member(PACKAGE, VERSION, MODEL),
            lambda n: {"input1": np.stack([_pixels(i, "calibration") for i in range(n)])},
            lambda n: [{"input1": _pixels(i, "evaluation")[None]} for i in range(n)],
            _read_right_as_fp32,
        )
    ]


def _captcha(index: int, split: str) -> tuple[Image.Image, str]:
    rng = np.random.default_rng([index, split == "evaluation", 7])
    image = Image.new("RGB", CANVAS, tuple(map(int, rng.integers(170, 256, 3))))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 8))):
        ends = [tuple(map(int, rng.integers(0, CANVAS, 2))) for _ in range(2)]
        draw.line(ends, fill=tuple(map(int, rng.integers(0, 200, 3))), width=1)
    text = "".join(rng.choice(list(LETTERS), int(rng.integers(4, 7))))
    faces, x = fonts(), int(rng.integers(4, 12))
    for letter in text:
        face = ImageFont.truetype(str(faces[rng.integers(len(faces))]), int(rng.integers(26, 38)))
        ink = tuple(map(int, rng.integers(0, 140, 3)))
        draw.text((x, int(rng.integers(0, 18))), letter, font=face, fill=ink)
        x += int(rng.integers(18, 24))
    if rng.random() < 0.5:
        image = image.filter(ImageFilter.SMOOTH)
    return image, text


def _pixels(index: int, split: str) -> np.ndarray:
    grey = _captcha(index, split)[0].resize(SERVED).convert("L")
    return (np.asarray(grey, np.float32) / 255.0)[None]


@cache
def _charset() -> tuple[str, ...]:
    """CHARSET_BETA of ddddocr's charsets.py, read as a literal (the package is not imported)."""
    module = ast.parse(wheel_member(PACKAGE, VERSION, CHARSETS).read_text(encoding="utf-8"))
    (value,) = [
        node.value
        for node in module.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CHARSET_BETA"
    ]
    return tuple(ast.literal_eval(value))


def _read(logits: np.ndarray) -> str:
    """The text of (steps, 1, classes) logits, greedy CTC as ddddocr decodes it."""
    (classes,) = ctc_texts(logits.transpose(1, 0, 2))
    return "".join(_charset()[c] for c in classes)


def _read_right_as_fp32(feeds, fp32, int8) -> dict:
    """Captchas are told apart by their order: the i-th feed is evaluation captcha i."""
    truths = [_captcha(i, "evaluation")[1].lower() for i in range(len(feeds))]
    fp32_right = [_read(ref[0]).lower() == t for ref, t in zip(fp32, truths)]
    int8_right = [_read(out[0]).lower() == t for out, t in zip(int8, truths)]
    kept = sum(a and b for a, b in zip(fp32_right, int8_right)) / max(sum(fp32_right), 1)
    return {
        "value": kept,
        "fp32_solved": sum(fp32_right),
        "int8_solved": sum(int8_right),
        "captchas": len(truths),
        "meets": kept >= TARGET,
    }
