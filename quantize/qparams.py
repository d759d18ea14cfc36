"""INT8 arithmetic: affine uint8 activations, symmetric weights, int32 biases.

This is the U8S8 scheme of ONNX Runtime's fast x86 kernels (MLAS): uint8 activations with a
zero point, int8 weights with zero point 0, int32 bias at scale s_activation * s_weight; or its
U8U8 scheme, with uint8 weights around a zero point of 128. Which, and how wide the weights may
be, is the weight format (`quantize.target.WEIGHT_FORMATS`).
"""

from collections.abc import Callable

import numpy as np

from quantize.target import WeightFormat

QMIN_U8, QMAX_U8 = 0, 255
INT32_MAX = np.iinfo(np.int32).max
BIAS_HEADROOM = (
    2**30
)  # a widened weight scale leaves the int32 bias half its range: float32 scales round


def activation_qparams(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / (QMAX_U8 - QMIN_U8)
    if scale <= 0:
        return np.float32(1.0), np.uint8(0)
    zero_point = int(np.clip(round(-lo / scale), QMIN_U8, QMAX_U8))
    return np.float32(scale), np.uint8(zero_point)


def quantize_weight(
    weight: np.ndarray,
    axis: int | None,
    fmt: WeightFormat,
    min_scale: np.ndarray | float = 0.0,
    reduction: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weights in the format `fmt`, zero point +- qmax (symmetric: the negated range is
    representable too), with float32 scales of at least `min_scale` and their zero points, per
    channel along `axis` (or one scale if None). A format with a pair limit needs `reduction`: a
    weight-shaped array as the kernel reduces it, a row per channel in its order (any rows if
    one scale)."""
    qmax = fmt.qmax
    if axis is None:
        peak = np.abs(weight).max(keepdims=True).reshape(())
    else:
        reduce = tuple(i for i in range(weight.ndim) if i != axis)
        peak = np.abs(weight).max(axis=reduce)
    scale = (
        _pair_scale(reduction(weight), peak, fmt.pair_limit)
        if fmt.pair_limit
        else np.where(peak > 0, peak / qmax, 1.0)
    )
    scale = np.maximum(scale, min_scale).astype(np.float32)
    shaped = (
        scale
        if axis is None
        else scale.reshape([-1 if i == axis else 1 for i in range(weight.ndim)])
    )
    q = np.clip(np.round(weight / shaped), -qmax, qmax)
    if fmt.pair_limit:
        assert _pair_peak(reduction(q)).max(initial=0) <= fmt.pair_limit, "a pair past the limit"
    q += fmt.zero_point
    return q.astype(fmt.dtype), scale, np.full(scale.shape, fmt.zero_point, fmt.dtype)


def _pair_scale(rows: np.ndarray, peak: np.ndarray, limit: int) -> np.ndarray:
    """Per row (or one for all if `peak` is a scalar): the finer of the scale that keeps every
    weight within limit / 2, which any pairing allows, and the largest pair's over limit - 1,
    which leaves room for both weights of a pair rounding up."""
    pairs = _pair_peak(rows)
    pairs = pairs if peak.ndim else pairs.max(initial=0.0)
    return np.where(peak > 0, np.minimum(peak / (limit // 2), pairs / (limit - 1)), 1.0)


def _pair_peak(rows: np.ndarray) -> np.ndarray:
    """Each row's largest |r[2j]| + |r[2j + 1]|."""
    magnitude = np.abs(rows.reshape(len(rows), -1).astype(np.float64))
    if magnitude.shape[1] % 2:
        magnitude = np.pad(magnitude, ((0, 0), (0, 1)))
    return magnitude.reshape(len(magnitude), -1, 2).sum(-1).max(-1, initial=0.0)


def bias_weight_scale_floor(bias: np.ndarray, input_scale: np.float32) -> np.ndarray:
    """The smallest weight scale per channel at which the int32 bias (scale s_in * s_w) holds `bias`."""
    return np.abs(bias.astype(np.float64)) / (float(input_scale) * BIAS_HEADROOM)


def quantize_bias(
    bias: np.ndarray, input_scale: np.float32, weight_scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    scale = (np.float32(input_scale) * weight_scale).astype(np.float32)
    q = np.clip(np.round(bias.astype(np.float64) / scale), -INT32_MAX, INT32_MAX).astype(
        np.int32
    )  # float64: INT32_MAX rounds up in float32
    return q, scale


def quantize_constant(array: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """A constant operand of an elementwise op, as uint8 over its own range."""
    scale, zero_point = activation_qparams(float(array.min()), float(array.max()))
    q = np.clip(np.round(array / scale) + zero_point, QMIN_U8, QMAX_U8).astype(np.uint8)
    return q, scale, zero_point
