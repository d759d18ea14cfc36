"""Run the FP32 model over the calibration stream and histogram every observed activation.

Unlike ONNX Runtime's calibrators, which keep every activation of every sample until the
end, each batch's activations are folded into fixed-size histograms and dropped, and no run
fetches more than `onnxio.FETCH_BUDGET` bytes of them (`ObservingSession`): peak memory is that
budget plus `bins` counters per tensor, whatever the sample count, batch size or input size.
The tensors of a run are binned on as many threads as the run had cores: numpy releases the GIL
while it bins, and the session's cores sit idle meanwhile.
"""

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx

from calibration.data import CalibrationSource
from calibration.histogram import StreamingHistogram
from onnxio import ObservingSession


def collect_histograms(
    model: onnx.ModelProto,
    tensors: list[str],
    source: CalibrationSource,
    num_samples: int,
    batch_size: int = 32,
    threads: int = 0,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, StreamingHistogram]:
    """Histograms of `tensors` over the first `num_samples` samples of `source`."""
    observer = ObservingSession(model, tensors, threads)
    histograms = {name: StreamingHistogram() for name in tensors}
    done = 0
    with ThreadPoolExecutor(threads or len(os.sched_getaffinity(0))) as binning:
        for batch in source.batches(0, num_samples, batch_size):
            for fetched in observer.run(batch):
                list(binning.map(lambda item: histograms[item[0]].update(item[1]), fetched.items()))
            done += source.samples_in(batch)
            progress(done, num_samples)
    return histograms


def collect_channel_absmax(
    model: onnx.ModelProto,
    tensors: list[str],
    source: CalibrationSource,
    num_samples: int,
    batch_size: int = 32,
    threads: int = 0,
) -> dict[str, np.ndarray]:
    """The largest |value| of each channel (last axis) of `tensors`: one vector per tensor."""
    observer = ObservingSession(model, tensors, threads)
    absmax: dict[str, np.ndarray] = {}
    for batch in source.batches(0, num_samples, batch_size):
        for fetched in observer.run(batch):
            for name, value in fetched.items():
                channel = np.abs(value.reshape(-1, value.shape[-1])).max(axis=0)
                absmax[name] = np.maximum(absmax[name], channel) if name in absmax else channel
    return absmax
