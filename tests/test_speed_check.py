"""keep_fp32_if_slower: an INT8 model that runs slower than the FP32 graph it came from, on
this CPU, goes back to FP32 whole and says why. The timings are stand-ins: what is tested is
the decision, not this machine's speed."""

import numpy as np
import onnx
import pytest
from graphs import outlier_mlp

from quantize import Recipe, pipeline, quantize
from quantize.kernel_timing import MIN_GAIN_MS
from quantize.pipeline import WHOLE_FP32, keep_fp32_if_slower
from quantize.runtime import session
from quantize.target import TARGETS, host_target


@pytest.fixture
def result(tmp_path):
    onnx.save(outlier_mlp(), str(tmp_path / "m.onnx"))
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (32, 16)).astype(np.float32)} for _ in range(4)]
    return quantize(tmp_path / "m.onnx", feeds, Recipe())


def _timed(monkeypatch, *int8_ms):
    """compare_sessions answering FP32 at 1 ms a batch and INT8 at each of `int8_ms`, in turn."""
    answers = iter(int8_ms)

    def compare_sessions(models, feeds, *args, **kwargs):
        return {"fp32": {"latency_ms_p50": 1.0}, "int8": {"latency_ms_p50": next(answers)}}

    monkeypatch.setattr(pipeline.bench, "compare_sessions", compare_sessions)


def test_an_int8_model_slower_than_fp32_goes_back_to_fp32_whole_with_its_reason(
    result, monkeypatch
):
    assert any(d.precision == "int8" for d in result.decisions)
    _timed(monkeypatch, 1.6, 1.25)
    checked = keep_fp32_if_slower(result)
    assert "0.80x" in checked.speed_check and checked.speed_check.endswith(WHOLE_FP32)
    assert all(d.precision == "fp32" for d in checked.decisions)
    assert all("ran slower than FP32" in d.reason for d in checked.decisions)
    assert not any(n.op_type == "QuantizeLinear" for n in checked.model.graph.node)
    # the FP32 graph itself, so that a benchmark may say its speed ratio is timing noise
    assert checked.model.graph.SerializeToString() == result.fp32_model.graph.SerializeToString()
    x = result.held_out[0]
    np.testing.assert_array_equal(
        session(checked.model).run(None, x)[0], session(result.fp32_model).run(None, x)[0]
    )


def test_int8_is_kept_when_faster_slower_by_less_than_timing_resolves_or_faster_again(
    result, monkeypatch
):
    _timed(monkeypatch, 0.7)
    assert keep_fp32_if_slower(result).model is result.model
    _timed(monkeypatch, 1.0 + MIN_GAIN_MS / 2)
    assert keep_fp32_if_slower(result).model is result.model
    _timed(monkeypatch, 1.2, 0.95)
    checked = keep_fp32_if_slower(result)
    assert checked.model is result.model and checked.speed_check.endswith("INT8 kept")


def test_a_model_made_for_another_cpu_is_not_timed_here(tmp_path, monkeypatch):
    onnx.save(outlier_mlp(), str(tmp_path / "m.onnx"))
    feeds = [{"x": np.random.default_rng(1).normal(0, 1, (32, 16)).astype(np.float32)}] * 4
    other = next(t for t in TARGETS if t != host_target())
    made = quantize(tmp_path / "m.onnx", feeds, Recipe(target=other))
    _timed(monkeypatch)  # any timing would raise StopIteration
    checked = keep_fp32_if_slower(made)
    assert checked.model is made.model and checked.speed_check.startswith("not measured")
