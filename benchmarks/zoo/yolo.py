"""The YOLOv8n detector NudeNet ships (PyPI nudenet; an Ultralytics export through
torch.onnx at opset 17): 18 body-part classes (faces, feet, ...), 2100 anchors at 320 x 320. Inputs
are crops of photographs of people (OpenCV's samples, Debian opencv-doc) and of the photographs
Debian's python3-skimage ships, fed as NudeNet does (RGB, x/255); calibration and evaluation take
different random crops. Beside the anchor agreement the issue sets, the detections NudeNet reports
(its own read-out) are scored as the layout detector's regions are."""

import numpy as np

from benchmarks.zoo.regions import Regions, region_f1, suppressed
from benchmarks.zoo.sources import people_photos, photos, wheel_member
from benchmarks.zoo.zoo_model import ZooModel

PACKAGE, VERSION, FILE = "nudenet", "3.4.2", "nudenet/320n.onnx"
SIDE = 320
TOP_ANCHORS = 10  # per image, the anchors FP32 scores highest
BOX_TOLERANCE, SCORE_TOLERANCE = 0.02, 0.02  # of the image side; of a class score
SCORE_THRESHOLD, NMS_IOU = 0.25, 0.45  # NudeNet's, its NMS across classes


def models() -> list[ZooModel]:
    return [
        ZooModel(
            "YOLOv8n (NudeNet)",
            "Ultralytics (torch.onnx)",
            f"top-{TOP_ANCHORS} anchors: box within 2 %, scores within 0.02 on >= 95 %",
            lambda: wheel_member(PACKAGE, VERSION, FILE),
            lambda n: {"images": np.stack([_crop(i, "calibration") for i in range(n)])},
            lambda n: [{"images": _crop(i, "evaluation")[None]} for i in range(n)],
            _anchors_and_detections,
        )
    ]


def _crop(index: int, split: str) -> np.ndarray:
    rng = np.random.default_rng([index, split == "evaluation"])
    pictures = people_photos() + photos()
    picture = pictures[index % len(pictures)]
    side = int(min(picture.size) * rng.uniform(0.5, 1.0))
    left = int(rng.integers(0, picture.width - side + 1))
    top = int(rng.integers(0, picture.height - side + 1))
    crop = picture.crop((left, top, left + side, top + side)).resize((SIDE, SIDE))
    return (np.asarray(crop, np.float32) / 255.0).transpose(2, 0, 1).copy()


def _anchors_and_detections(feeds, fp32, int8) -> dict:
    """The share of FP32's top anchors INT8 keeps close (the target's metric), and the F1 of the
    detections NudeNet would report from INT8's output against those it reports from FP32's."""
    close = []
    for ref, out in zip(fp32, int8):
        ref, out = ref[0][0], out[0][0]  # (4 box + 18 class rows, anchors)
        top = np.argsort(-ref[4:].max(0))[:TOP_ANCHORS]
        box_error = np.abs(ref[:4, top] - out[:4, top]).max(0) / SIDE
        score_error = np.abs(ref[4:, top] - out[4:, top]).max(0)
        close.append((box_error <= BOX_TOLERANCE) & (score_error <= SCORE_TOLERANCE))
    share = float(np.concatenate(close).mean())
    f1, detections = region_f1(
        [(_detections(ref), _detections(out)) for ref, out in zip(fp32, int8)]
    )
    return {
        "value": share,
        "anchors": int(np.concatenate(close).size),
        "meets": share >= 0.95,
        "detection_f1": f1,
        "detections": detections,
    }


def _detections(outputs: list) -> Regions:
    """What NudeNet reports for one image (batch 1): each anchor's best class, its box clipped to
    the image, non-maximum suppression across classes."""
    rows = outputs[0][0]
    centre, size = rows[:2].T, rows[2:4].T
    boxes = np.clip(np.concatenate([centre - size / 2, centre + size / 2], 1), 0, SIDE)
    scores = rows[4:].max(0)
    kept = suppressed(boxes, scores, SCORE_THRESHOLD, NMS_IOU)
    return boxes[kept], rows[4:].argmax(0)[kept]
