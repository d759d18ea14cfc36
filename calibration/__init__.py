"""Calibration: stream representative data through the FP32 model and choose INT8 ranges.

- `open_calibration(path, inputs)` reads `.npy`, `.npz`, HDF5 or an image directory in batches;
- `collect_histograms(model, source, ...)` runs the model and keeps one bounded
  `StreamingHistogram` per activation: memory does not grow with the number of samples;
- `choose_range(histogram, method)` turns a histogram into the range INT8 must cover.
"""

from calibration.collector import collect_channel_absmax, collect_histograms
from calibration.data import CalibrationSource, InputSpec, ImagePreprocess, open_calibration
from calibration.histogram import StreamingHistogram
from calibration.methods import METHODS, choose_range

__all__ = [
    "METHODS",
    "CalibrationSource",
    "ImagePreprocess",
    "InputSpec",
    "StreamingHistogram",
    "choose_range",
    "collect_channel_absmax",
    "collect_histograms",
    "open_calibration",
]
