"""Calibration memory must not grow with the number of samples (README: 'Memory bound')."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxio import ObservingSession

# Each sample carries 3 activations of 32x64x64 float32 = 1.5 MiB; 900 more samples kept in
# memory the way ONNX Runtime's calibrators keep them would add about 1.3 GiB.
PROBE = textwrap.dedent("""
    import json, resource, sys
    from calibration import collect_histograms, open_calibration
    from quantize.pipeline import input_specs
    import onnx
    model = onnx.load(sys.argv[1])
    source = open_calibration(sys.argv[2], input_specs(model))
    collect_histograms(model, ["c1", "r1", "c2"], source, int(sys.argv[3]), batch_size=16)
    print(json.dumps({"peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
""")


def _model(path):
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.2, (32, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.1, (32, 32, 3, 3)).astype(np.float32), "w2"),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])],
        [helper.make_tensor_value_info("c2", TensorProto.FLOAT, ["N", 32, 64, 64])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _peak_kib(model, data, samples):
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(model), str(data), str(samples)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])["peak_kib"]


def test_1000_samples_take_no_more_peak_memory_than_100(tmp_path):
    _model(tmp_path / "m.onnx")
    np.save(
        tmp_path / "x.npy",
        np.random.default_rng(1).normal(size=(1000, 3, 64, 64)).astype(np.float32),
    )
    small = _peak_kib(tmp_path / "m.onnx", tmp_path / "x.npy", 100)
    large = _peak_kib(tmp_path / "m.onnx", tmp_path / "x.npy", 1000)
    # The data file (47 MiB) is memory-mapped: pages read stay resident, so allow for it.
    assert large - small < 64 * 1024, (small, large)


def test_an_observing_session_fetches_within_its_budget_and_misses_no_value(tmp_path):
    _model(tmp_path / "m.onnx")
    model, names = onnx.load(tmp_path / "m.onnx"), ["c1", "r1", "c2"]
    x = np.random.default_rng(2).normal(size=(40, 3, 64, 64)).astype(np.float32)
    whole = next(ObservingSession(model, names).run({"x": x}))
    budget = 4 << 20  # a sample's three activations take 1.5 MiB: two samples a run

    parts = list(ObservingSession(model, names, budget=budget).run({"x": x}))
    assert len(parts) == 20 and all(sum(v.nbytes for v in p.values()) <= budget for p in parts)
    for name in names:
        np.testing.assert_allclose(np.concatenate([p[name] for p in parts]), whole[name], rtol=1e-5)

    # Rows kept whole (shapes must be the batch's): the tensors are fetched in groups instead.
    groups = list(ObservingSession(model, names, budget=budget).run({"x": x[:4]}, split_rows=False))
    assert [list(g) for g in groups] == [["c1", "r1"], ["c2"]]
    assert all(v.shape[0] == 4 for g in groups for v in g.values())
