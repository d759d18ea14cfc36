"""The peers the benchmarks run (benchmarks/rivals.py)."""

import onnxruntime as ort
import pytest
from graphs import conv_net, images

from benchmarks import rivals
from quantize.frontend import MIN_OPSET
from quantize.frontend.onnx_file import default_opset


def test_a_benchmark_without_quark_stops_as_it_starts_with_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(rivals, "QUARK_PYTHON", tmp_path / "absent" / "python")
    with pytest.raises(SystemExit, match=r"AMD Quark is not installed: no .*absent/python \(run"):
        rivals.require_quark()


def test_ort_static_raises_an_old_opset_model_so_its_per_channel_graph_runs():
    fp32 = conv_net(opset=12)  # below 13 quantize_static per channel writes DequantizeLinear
    # with an axis attribute that opset 12 does not have: ORT refuses the graph
    int8 = rivals.ort_quantize_static(fp32, {"x": images(16)}, batch=8)
    per_channel = [
        node
        for node in int8.graph.node
        if node.op_type == "DequantizeLinear" and any(a.name == "axis" for a in node.attribute)
    ]
    assert per_channel and default_opset(int8) >= MIN_OPSET
    x = images(2)
    ort.InferenceSession(int8.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
