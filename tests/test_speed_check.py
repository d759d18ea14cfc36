"""keep_fp32_unless_faster: an INT8 model that does not save WIN_MARGIN of the time of the FP32
graph it came from, on this CPU at the batch it will be served at, goes back to FP32 whole and
says why. The timings are stand-ins: what is tested is the decision, not this machine's speed."""

import numpy as np
import onnx
import pytest
from graphs import conv_net, images, outlier_mlp

from quantize import Recipe, RunOptions, bias_correction, pipeline, quantize
from quantize.kernel_timing import MIN_GAIN_MS
from quantize.pipeline import (
    CLEAR_LOSS,
    CLOSE_CALL,
    UNMEASURED,
    WHOLE_FP32,
    WIN_MARGIN,
    keep_fp32,
    keep_fp32_unless_faster,
)
from quantize.runtime import session
from quantize.target import TARGETS, host_target


def _quantized(tmp_path, serve_batch=None):
    onnx.save(outlier_mlp(), str(tmp_path / "m.onnx"))
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (32, 16)).astype(np.float32)} for _ in range(4)]
    return quantize(tmp_path / "m.onnx", feeds, Recipe(), RunOptions(serve_batch=serve_batch))


@pytest.fixture
def result(tmp_path):
    return _quantized(tmp_path)


def _timed(monkeypatch, *int8_ms, fp32_ms=1.0, rows=32):
    """compare_sessions answering FP32 at `fp32_ms` a batch and INT8 at each of `int8_ms`, in
    turn; it checks that it times batches of `rows` samples."""
    answers = iter(int8_ms)

    def compare_sessions(models, feeds, *args, **kwargs):
        assert {len(x) for x in feeds.values()} == {rows}
        return {"fp32": {"latency_ms_p50": fp32_ms}, "int8": {"latency_ms_p50": next(answers)}}

    monkeypatch.setattr(pipeline.bench, "compare_sessions", compare_sessions)


def test_an_int8_model_slower_than_fp32_goes_back_to_fp32_whole_with_its_reason(
    result, monkeypatch
):
    assert any(d.precision == "int8" for d in result.decisions)
    _timed(monkeypatch, 1.25, 1.25)
    checked = keep_fp32_unless_faster(result)
    assert "0.80x" in checked.speed_check and checked.speed_check.endswith(WHOLE_FP32)
    assert all(d.precision == "fp32" for d in checked.decisions)
    assert all(f"was not {WIN_MARGIN:.0%} faster than FP32" in d.reason for d in checked.decisions)
    assert not any(n.op_type == "QuantizeLinear" for n in checked.model.graph.node)
    assert checked.bias_correction == f"none: {WHOLE_FP32}"  # no INT8 Conv left to correct
    # the FP32 graph itself, so that a benchmark may say its speed ratio is timing noise
    assert checked.model.graph.SerializeToString() == result.fp32_model.graph.SerializeToString()
    x = result.held_out[0]
    np.testing.assert_array_equal(
        session(checked.model).run(None, x)[0], session(result.fp32_model).run(None, x)[0]
    )


def test_an_int8_model_at_fp32s_speed_buys_nothing_and_goes_back_to_fp32(result, monkeypatch):
    _timed(monkeypatch, 10.0, 9.9, fp32_ms=10.0)
    checked = keep_fp32_unless_faster(result)
    assert "1.01x" in checked.speed_check and checked.speed_check.endswith(WHOLE_FP32)
    _timed(monkeypatch, 10.0 * (1 - WIN_MARGIN) - 0.1, 10.0 * (1 - WIN_MARGIN) - 0.1, fp32_ms=10.0)
    assert keep_fp32_unless_faster(result).model is result.model


def test_a_close_call_is_decided_by_a_second_longer_timing_and_a_clear_one_by_the_first(
    result, monkeypatch
):
    close = 1.0 - (CLOSE_CALL + WIN_MARGIN) / 2  # faster by more than the margin, less than clearly
    _timed(monkeypatch, close, 1.0)
    checked = keep_fp32_unless_faster(result)
    assert "1.00x" in checked.speed_check and checked.speed_check.endswith(WHOLE_FP32)
    _timed(monkeypatch, close, close)
    assert keep_fp32_unless_faster(result).model is result.model
    _timed(monkeypatch, 1.0 - CLOSE_CALL - 0.01)  # clearly faster: one timing
    assert keep_fp32_unless_faster(result).model is result.model
    _timed(monkeypatch, 1.0 + CLEAR_LOSS + 0.01)  # clearly slower: one timing
    assert keep_fp32_unless_faster(result).speed_check.endswith(WHOLE_FP32)


def test_int8_is_kept_when_faster_short_by_less_than_timing_resolves_or_faster_again(
    result, monkeypatch
):
    _timed(monkeypatch, 0.7)
    assert keep_fp32_unless_faster(result).model is result.model
    _timed(monkeypatch, 1.0 - WIN_MARGIN + MIN_GAIN_MS / 2, 1.0 - WIN_MARGIN + MIN_GAIN_MS / 2)
    assert keep_fp32_unless_faster(result).model is result.model
    _timed(monkeypatch, 1.2, 0.8)
    checked = keep_fp32_unless_faster(result)
    assert checked.model is result.model and checked.speed_check.endswith("INT8 kept")


@pytest.mark.parametrize("rows", [1, 5, 45])
def test_the_speed_check_times_the_batch_the_model_will_be_served_at(tmp_path, monkeypatch, rows):
    made = _quantized(tmp_path, serve_batch=rows)
    first = made.held_out[0]["x"]
    served = made.served_feeds["x"]
    assert len(served) == rows
    np.testing.assert_array_equal(served[: min(rows, 32)], first[: min(rows, 32)])
    if rows > 32:  # samples repeated in turn
        np.testing.assert_array_equal(served[32:], first[: rows - 32])
    _timed(monkeypatch, 0.5, rows=rows)
    assert f"a batch of {rows})" in keep_fp32_unless_faster(made).speed_check


def test_a_model_made_for_another_cpu_is_not_timed_here(tmp_path, monkeypatch):
    onnx.save(outlier_mlp(), str(tmp_path / "m.onnx"))
    feeds = [{"x": np.random.default_rng(1).normal(0, 1, (32, 16)).astype(np.float32)}] * 4
    other = next(t for t in TARGETS if t != host_target())
    made = quantize(tmp_path / "m.onnx", feeds, Recipe(target=other))
    _timed(monkeypatch)  # any timing would raise StopIteration
    checked = keep_fp32_unless_faster(made)
    assert checked.model is made.model and checked.speed_check.startswith("not measured")


def test_one_set_of_int8_nodes_is_timed_once_and_a_fallback_is_timed_anew(result, monkeypatch):
    _timed(monkeypatch, 0.7)
    checked = keep_fp32_unless_faster(result)
    assert checked.speed_check.endswith("INT8 kept")
    assert keep_fp32_unless_faster(checked) is checked  # a second timing would raise
    int8 = next(d.name for d in checked.decisions if d.precision == "int8")
    fallen = keep_fp32(checked, {int8: "a test's fallback"})
    assert fallen.speed_check == UNMEASURED
    _timed(monkeypatch, 1.0, 1.0)
    assert keep_fp32_unless_faster(fallen).speed_check.endswith(WHOLE_FP32)


@pytest.mark.parametrize("int8_ms", [0.5, 1.0])
def test_the_clis_speed_check_comes_before_bias_correction_which_a_model_back_in_fp32_skips(
    tmp_path, monkeypatch, int8_ms
):
    onnx.save(conv_net(), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    corrected = []
    measure = bias_correction.bias_shifts
    monkeypatch.setattr(
        bias_correction, "bias_shifts", lambda *a: corrected.append(1) or measure(*a)
    )
    monkeypatch.setattr(pipeline.kernel_timing, "slower_in_int8", lambda *a: {})  # no node timing
    _timed(monkeypatch, int8_ms, int8_ms, rows=8)
    options = RunOptions(serve_batch=8, speed_check=True)
    made = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", Recipe(), options)
    if int8_ms == 1.0:
        assert made.speed_check.endswith(WHOLE_FP32) and not corrected
        assert made.bias_correction == f"none: {WHOLE_FP32}"
    else:  # corrected after the check, which still describes the model: same nodes in INT8
        assert made.speed_check.endswith("INT8 kept") and corrected
        assert "Conv biases corrected" in made.bias_correction
