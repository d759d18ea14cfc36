"""Calibration: stream representative data through the FP32 model and choose INT8 ranges.

- `open_calibration(path, inputs)` reads `.npy`, `.npz` (or whole feeds, `save_feeds`), HDF5 or an
  image directory in batches;
- `collect_histograms(model, source, ...)` runs the model and keeps one bounded
  `StreamingHistogram` per activation: memory does not grow with the number of samples;
- `choose_range(histogram, Percentile(99.999))` turns a histogram into the range INT8 must cover.
"""

from calibration.collector import collect_channel_absmax, collect_histograms
from calibration.data import (
    CalibrationSource,
    ImagePreprocess,
    InputSpec,
    load_feeds,
    open_calibration,
    save_feeds,
)
from calibration.histogram import StreamingHistogram
from calibration.methods import (
    METHODS,
    Entropy,
    MinMax,
    Mse,
    Percentile,
    RangeMethod,
    choose_range,
    method_from_dict,
    method_to_dict,
)

__all__ = [
    "METHODS",
    "Entropy",
    "MinMax",
    "Mse",
    "Percentile",
    "RangeMethod",
    "CalibrationSource",
    "ImagePreprocess",
    "InputSpec",
    "StreamingHistogram",
    "choose_range",
    "collect_channel_absmax",
    "collect_histograms",
    "method_from_dict",
    "method_to_dict",
    "load_feeds",
    "open_calibration",
    "save_feeds",
]
