"""`collect_histograms` (calibration/collector.py) bins a run's tensors on several threads: the
histograms are those of binning them one after another."""

from pathlib import Path

import numpy as np
import onnx_ir as ir
from graphs import conv_net, images

from calibration import CalibrationSource, StreamingHistogram, collect_histograms
from onnxio import ObservingSession
from quantize.pipeline import input_specs


def test_histograms_binned_on_two_threads_equal_those_binned_in_turn():
    model = conv_net()
    tensors = [v.name for n in ir.serde.deserialize_model(model).graph for v in n.outputs]
    x = images(40) * np.float32(3)
    source = CalibrationSource(
        Path("memory"), input_specs(model), len(x), lambda a, b: {"x": x[a:b]}
    )
    got = collect_histograms(model, tensors, source, len(x), batch_size=8, threads=2)

    expected = {name: StreamingHistogram() for name in tensors}
    observer = ObservingSession(model, tensors)
    for batch in source.batches(0, len(x), 8):
        for fetched in observer.run(batch):
            for name, value in fetched.items():
                expected[name].update(value)
    assert len(tensors) > 2
    for name in tensors:
        assert np.array_equal(got[name].counts, expected[name].counts), name
        assert (got[name].limit, got[name].min, got[name].max, got[name].zeros) == (
            expected[name].limit,
            expected[name].min,
            expected[name].max,
            expected[name].zeros,
        )
