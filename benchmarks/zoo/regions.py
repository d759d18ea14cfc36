"""What the zoo's detectors report, read the same way for FP32 and INT8: boxes (x0, y0, x1, y1)
after non-maximum suppression, and the F1 of INT8's regions against FP32's."""

import numpy as np

MATCH_IOU = 0.5  # an INT8 region is FP32's if it has its class and overlaps it this much

Regions = tuple[np.ndarray, np.ndarray]  # boxes (n, 4) and their classes (n,)


def suppressed(
    boxes: np.ndarray, scores: np.ndarray, threshold: float, overlap: float
) -> list[int]:
    """Indices of the boxes scoring above `threshold` that no higher-scoring kept box overlaps
    at IoU > `overlap`, best first."""
    kept: list[int] = []
    candidates = np.flatnonzero(scores > threshold)
    for i in candidates[np.argsort(-scores[candidates])]:
        if not kept or iou(boxes[i][None], boxes[kept]).max() <= overlap:
            kept.append(int(i))
    return kept


def region_f1(pages: list[tuple[Regions, Regions]]) -> tuple[float, int]:
    """F1 of INT8's regions against FP32's over `pages` of (FP32's, INT8's) regions, and how many
    FP32 found: a region matches one of FP32's of its class at IoU >= MATCH_IOU, each once."""
    matched = found = expected = 0
    for (ref_boxes, ref_classes), (boxes, classes) in pages:
        matched += _matches(ref_boxes, ref_classes, boxes, classes)
        found, expected = found + len(boxes), expected + len(ref_boxes)
    return (2 * matched / (found + expected) if found + expected else 1.0), expected


def _matches(ref_boxes, ref_classes, boxes, classes) -> int:
    if not len(ref_boxes) or not len(boxes):
        return 0
    overlap = iou(ref_boxes, boxes) * (ref_classes[:, None] == classes[None])
    taken: set[int] = set()
    for i in np.argsort(-overlap.max(1)):
        free = [j for j in np.argsort(-overlap[i]) if j not in taken]
        if free and overlap[i, free[0]] >= MATCH_IOU:
            taken.add(int(free[0]))
    return len(taken)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), -1)
    return inter / (_area(a)[:, None] + _area(b)[None] - inter)


def _area(boxes: np.ndarray) -> np.ndarray:
    return np.prod(boxes[:, 2:] - boxes[:, :2], -1)
