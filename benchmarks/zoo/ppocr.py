"""PP-OCRv4 as RapidOCR ships it (PyPI rapidocr-onnxruntime; Paddle2ONNX exports at opset 11-12):
the text detector (a DB segmentation map), the recogniser (SVTR: convolutions then attention,
CTC over 6625 characters) and the mobile direction classifier (0 or 180 degrees). Inputs are
text rendered with Debian's DejaVu fonts, normalised as RapidOCR does: BGR, (x/255 - 0.5)/0.5."""

import numpy as np
from PIL import Image

from benchmarks.zoo.sources import fonts, sentences, text_line, text_page, wheel_member
from benchmarks.zoo.zoo_model import Feed, ZooModel

PACKAGE, VERSION = "rapidocr-onnxruntime", "1.4.4"
FILES = {
    "detector": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
    "recogniser": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
    "classifier": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
}
PAGE_SIDE = 640  # a multiple of 32, as RapidOCR resizes pages to
LINE_HEIGHT, CLS_WIDTH = 48, 192
REC_CALIBRATION_WIDTH = (
    640  # one width for the .npz; served batches are as wide as their widest line
)
SERVED_LINES = 6  # RapidOCR's rec_batch_num and cls_batch_num
TEXT_THRESHOLD = 0.3  # RapidOCR's det thresh: a pixel is text above it
EXPORTER = "Paddle2ONNX"


def models() -> list[ZooModel]:
    def build(part):
        return lambda: wheel_member(PACKAGE, VERSION, FILES[part])

    return [
        ZooModel(
            "PP-OCRv4 detector",
            EXPORTER,
            "text-map IoU >= 0.90",
            build("detector"),
            lambda n: {"x": np.stack([_page(i, "dev") for i in range(n)])},
            lambda n: [{"x": _page(i, "test")[None]} for i in range(n)],
            _text_map_iou,
        ),
        ZooModel(
            "PP-OCRv4 recogniser",
            EXPORTER,
            "CTC text equal to FP32's on >= 95 % of lines",
            build("recogniser"),
            lambda n: {"x": _lines(range(n), "dev", "recogniser", REC_CALIBRATION_WIDTH)},
            lambda n: _served(n, "recogniser"),
            equal_text,
        ),
        ZooModel(
            "PP-OCR mobile direction classifier",
            EXPORTER,
            "agreement >= 99 %",
            build("classifier"),
            lambda n: {"x": _lines(range(n), "dev", "classifier")},
            lambda n: _served(n, "classifier"),
            _agreement,
        ),
    ]


def _normalise(image) -> np.ndarray:
    bgr = np.asarray(image, np.float32)[..., ::-1] / 255.0
    return ((bgr - 0.5) / 0.5).transpose(2, 0, 1).copy()


def _page(index: int, split: str) -> np.ndarray:
    rng = np.random.default_rng([index, split == "test"])
    texts = sentences(split)
    picks = rng.choice(len(texts), 24, replace=False)
    return _normalise(text_page([texts[i][:60] for i in picks], PAGE_SIDE, rng))


def _line(index: int, split: str, upside_down: bool) -> Image.Image:
    """One sentence (its first 24 characters) as a text line, at the models' height of 48."""
    rng = np.random.default_rng([index, split == "test", 1])
    texts, faces = sentences(split), fonts()
    image = text_line(
        texts[index % len(texts)][:24], faces[index % len(faces)], int(rng.integers(18, 40))
    )
    if upside_down:
        image = image.rotate(180)
    return image.resize((int(np.ceil(image.width * LINE_HEIGHT / image.height)), LINE_HEIGHT))


def _lines(indices, split: str, model: str, width: int | None = None) -> np.ndarray:
    """Lines as RapidOCR batches them: the classifier squeezes each into 192 pixels (odd lines
    upside down, for it to find); the recogniser keeps the aspect and pads to the widest line
    of the batch (or to `width`), zeros on the right."""
    images = [_line(i, split, model == "classifier" and i % 2 == 1) for i in indices]
    if model == "classifier":
        images = [im.resize((min(im.width, CLS_WIDTH), LINE_HEIGHT)) for im in images]
        width = CLS_WIDTH
    width = width or max(im.width for im in images)
    batch = np.zeros((len(images), 3, LINE_HEIGHT, width), np.float32)
    for row, image in zip(batch, images):
        image = image.resize((min(image.width, width), LINE_HEIGHT))
        row[:, :, : image.width] = _normalise(image)
    return batch


def _served(n: int, model: str) -> list[Feed]:
    return [
        {"x": _lines(range(i, min(n, i + SERVED_LINES)), "test", model)}
        for i in range(0, n, SERVED_LINES)
    ]


def _text_map_iou(feeds, fp32, int8) -> dict:
    ious = []
    for ref, out in zip(fp32, int8):
        a, b = ref[0] > TEXT_THRESHOLD, out[0] > TEXT_THRESHOLD
        ious.append((a & b).sum() / max((a | b).sum(), 1))
    return {
        "value": float(np.mean(ious)),
        "worst": float(np.min(ious)),
        "meets": bool(np.mean(ious) >= 0.90),
    }


def ctc_texts(probabilities: np.ndarray) -> list[tuple[int, ...]]:
    """Greedy CTC: the best class per step, repeats merged, blanks (class 0) dropped."""
    texts = []
    for best in probabilities.argmax(-1):
        kept = best[np.r_[True, best[1:] != best[:-1]]]
        texts.append(tuple(int(c) for c in kept if c != 0))
    return texts


def equal_text(feeds, fp32, int8) -> dict:
    equal = [
        a == b for ref, out in zip(fp32, int8) for a, b in zip(ctc_texts(ref[0]), ctc_texts(out[0]))
    ]
    share = float(np.mean(equal))
    return {"value": share, "lines": len(equal), "meets": share >= 0.95}


def _agreement(feeds, fp32, int8) -> dict:
    same = np.concatenate([r[0].argmax(-1) == o[0].argmax(-1) for r, o in zip(fp32, int8)])
    return {
        "value": float(same.mean()),
        "lines": int(same.size),
        "meets": bool(same.mean() >= 0.99),
    }
