"""Nodes whose INT8 kernel measures slower than FP32 here stay FP32, and say why."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from graphs import conv_net, images

from quantize import (
    NodeOverrides,
    Recipe,
    RunOptions,
    coverage,
    kernel_timing,
    pipeline,
    quantize,
    target,
)
from quantize.report import summarize


def timings(int8_ms: dict[str, list[float]]):
    """A stand-in for the measurement: each op type's INT8 latencies in turn, FP32 at 1 ms."""
    calls = {op: iter(ms) for op, ms in int8_ms.items()}

    def compare_sessions(models, feeds, threads, seconds, rounds, min_block):
        op = next(
            n.op_type for n in models["fp32"].graph.node if n.op_type in kernel_timing.TIMED_OPS
        )
        return {"int8": {"latency_ms_p50": next(calls[op])}, "fp32": {"latency_ms_p50": 1.0}}

    return compare_sessions


def whole_models(kept_ms: float, int8_ms: float, timed: list | None = None):
    """A stand-in for the whole-model check of the nodes kernel timing kept FP32: the model
    with them FP32 runs in `kept_ms`, with them INT8 in `int8_ms`; the models go to `timed`."""

    def latencies_ms(result, models, seconds):
        assert list(models) == ["kept", "int8"]
        (timed if timed is not None else []).append(models)
        return {"kept": kept_ms, "int8": int8_ms}

    return latencies_ms


@pytest.fixture(autouse=True)
def worth_timing(monkeypatch):
    """Every node's INT8 model costs more than MIN_GAIN_MS at a glance, unless a test says
    otherwise: the timings then come from each test's compare_sessions. The whole model with
    the nodes kept FP32 runs as fast as with them INT8, unless a test says otherwise."""
    monkeypatch.setattr(kernel_timing.bench, "glance_ms", lambda *_: 1.0)
    monkeypatch.setattr(pipeline, "latencies_ms", whole_models(1.0, 1.0))


@pytest.fixture
def net(tmp_path):
    onnx.save(conv_net(channels=8), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(40))
    return tmp_path / "net.onnx", tmp_path / "x.npy"


def test_convs_measured_slower_in_int8_stay_fp32_with_the_measurement_as_reason(net, monkeypatch):
    monkeypatch.setattr(
        kernel_timing.bench, "compare_sessions", timings({"Conv": [1.5, 1.5] * 2, "Gemm": [0.5]})
    )
    result = quantize(*net, Recipe())
    decisions = {d.name: d for d in result.decisions}
    for conv in ("conv1", "conv2"):
        assert decisions[conv].precision == "fp32"
        assert decisions[conv].reason.startswith(
            f"INT8 slower than FP32 on {target.host_target()}: 1.50 ms vs 1.00 ms"
        )
    assert decisions["fc"].precision == "int8"
    assert (
        result.kernels["int8"].get("QLinearConv") is None
        and result.kernels["int8"].get("QGemm") == 1
    )
    assert result.timing_check == (
        "checked on the whole model: 1.00 ms a batch as kernel timing chose (2 kept FP32), "
        "1.00 ms with INT8 there too: kept FP32"
    )
    assert summarize(result)["kernel_timing"].endswith(result.timing_check)


def test_kept_nodes_go_back_to_int8_when_the_whole_model_runs_faster_with_them_int8(
    net, monkeypatch
):
    monkeypatch.setattr(
        kernel_timing.bench, "compare_sessions", timings({"Conv": [1.5, 1.5] * 2, "Gemm": [0.5]})
    )
    timed = []
    monkeypatch.setattr(pipeline, "latencies_ms", whole_models(1.0, 0.9, timed))
    result = quantize(*net, Recipe())
    untimed = quantize(*net, Recipe(kernel_timing=False))
    [models] = timed
    assert [
        coverage.kernel_counts(coverage.optimized_graph(models[m]))["int8"].get("QLinearConv")
        for m in ("kept", "int8")
    ] == [None, 2]
    assert result.timing_check.endswith("0.90 ms with INT8 there too: INT8 taken")
    assert all(d.precision == "int8" for d in result.decisions if d.op_type in ("Conv", "Gemm"))
    # calibrated once, for every node either model quantizes: INT8 taken is the untimed model
    assert result.model.graph == untimed.model.graph


def test_a_whole_model_faster_by_less_than_the_margin_keeps_the_nodes_fp32(net, monkeypatch):
    monkeypatch.setattr(
        kernel_timing.bench, "compare_sessions", timings({"Conv": [1.5, 1.5] * 2, "Gemm": [0.5]})
    )
    almost = 10.0 * (1 - pipeline.CONFIRM_MARGIN / 2)  # 0.15 ms saved: above MIN_GAIN_MS
    monkeypatch.setattr(pipeline, "latencies_ms", whole_models(10.0, almost))
    result = quantize(*net, Recipe())
    assert result.timing_check.endswith("kept FP32")
    assert {d.name for d in result.decisions if d.precision == "fp32"} >= {"conv1", "conv2"}


def test_a_slower_first_measurement_that_the_second_does_not_confirm_changes_nothing(
    net, monkeypatch
):
    monkeypatch.setattr(
        kernel_timing.bench, "compare_sessions", timings({"Conv": [1.5, 1.02] * 2, "Gemm": [0.5]})
    )
    result = quantize(*net, Recipe())
    assert all(d.precision == "int8" for d in result.decisions if d.op_type in ("Conv", "Gemm"))


def test_nodes_are_timed_at_the_batch_the_model_will_be_served_at(net, monkeypatch):
    rows = []

    def compare_sessions(models, feeds, threads, seconds, rounds, min_block):
        rows.append(len(feeds["x"]))
        return {"int8": {"latency_ms_p50": 0.5}, "fp32": {"latency_ms_p50": 1.0}}

    monkeypatch.setattr(kernel_timing.bench, "compare_sessions", compare_sessions)
    quantize(*net, Recipe(), RunOptions(serve_batch=3))
    assert rows and set(rows) == {3}


def test_a_node_that_costs_next_to_nothing_in_int8_keeps_int8_and_fp32_is_not_timed(
    net, monkeypatch
):
    glanced = []

    def glance_ms(model, feeds, threads):
        glanced.append(next(n.op_type for n in model.graph.node if n.op_type in {"Conv", "Gemm"}))
        return kernel_timing.MIN_GAIN_MS * 0.9 if glanced[-1] == "Conv" else 1.0

    monkeypatch.setattr(kernel_timing.bench, "glance_ms", glance_ms)
    monkeypatch.setattr(kernel_timing.bench, "compare_sessions", timings({"Gemm": [1.5, 1.5]}))
    result = quantize(*net, Recipe())
    decisions = {d.name: d for d in result.decisions}
    assert sorted(glanced) == ["Conv", "Conv", "Gemm"]
    assert decisions["conv1"].precision == decisions["conv2"].precision == "int8"
    assert decisions["fc"].precision == "fp32"  # timed: the one node FP32 beats


def test_nothing_is_timed_for_another_cpus_target_or_when_switched_off(net, monkeypatch):
    def refuse(*_):
        raise AssertionError("timed kernels for a target this CPU does not have")

    monkeypatch.setattr(kernel_timing.bench, "compare_sessions", refuse)
    monkeypatch.setattr(kernel_timing.bench, "glance_ms", refuse)
    other = next(t for t in target.TARGETS if t != target.host_target())
    assert quantize(*net, Recipe(target=other)).recipe.target == other
    quantize(*net, Recipe(kernel_timing=False))


def test_a_conv_between_fp32_ops_is_timed_with_a_float_input_and_output(net, monkeypatch):
    seen = {}  # a timed node's input shape -> (input dtype, output type) of its one-node models

    def compare_sessions(models, feeds, threads, seconds, rounds, min_block):
        output = models["int8"].graph.output[0].type.tensor_type.elem_type
        seen[feeds["x"].shape[1:]] = (
            feeds["x"].dtype,
            onnx.helper.tensor_dtype_to_np_dtype(output),
        )
        return {"int8": {"latency_ms_p50": 0.5}, "fp32": {"latency_ms_p50": 1.0}}

    monkeypatch.setattr(kernel_timing.bench, "compare_sessions", compare_sessions)
    conv2_input = (8, 8, 8)  # after pool1; read by add1
    quantize(*net, Recipe())
    assert seen[conv2_input] == (np.uint8, np.uint8)
    quantize(*net, Recipe(overrides=NodeOverrides(fp32=("pool1", "add1"))))
    assert seen[conv2_input] == (np.float32, np.float32)


BOUNDARIES = [kernel_timing.Boundaries(i, o) for i in (True, False) for o in (True, False)]


@pytest.mark.parametrize("boundaries", BOUNDARIES, ids=lambda b: f"uint8 in {b[0]}, out {b[1]}")
@pytest.mark.parametrize("weights", ["paired", "int7", "uint8"])
@pytest.mark.parametrize("op_type", ["Conv", "Gemm"])
def test_the_timed_int8_model_fuses_into_an_integer_kernel_and_the_fp32_one_does_not(
    op_type, weights, boundaries
):
    model = ir.serde.deserialize_model(conv_net(channels=8))
    node = next(n for n in model.graph if n.op_type == op_type)
    shape = (4, 8) if op_type == "Gemm" else (4, 3, 16, 16)
    fmt = target.WEIGHT_FORMATS[weights]

    def kernels(precision):
        one_node = kernel_timing._one_node_model(node, shape, precision, fmt, boundaries)
        return coverage.kernel_counts(coverage.optimized_graph(one_node))

    int8, fp32 = kernels("int8"), kernels("fp32")
    assert int8["int8"] == {"QLinearConv" if op_type == "Conv" else "QGemm": 1}
    assert int8["float"] == {}
    assert fp32["int8"] == {} and fp32["float"].get(op_type) == 1


def test_a_fast_node_is_screened_for_a_hundred_runs_and_confirmed_for_the_full_time(
    net, monkeypatch
):
    seconds = []  # of each measurement, in turn: every node is screened, then confirmed

    def compare_sessions(models, feeds, threads, timed_seconds, rounds, min_block):
        seconds.append(timed_seconds)
        return {"int8": {"latency_ms_p50": 1.5}, "fp32": {"latency_ms_p50": 1.0}}

    monkeypatch.setattr(kernel_timing.bench, "compare_sessions", compare_sessions)
    fast_screen = kernel_timing.SCREEN_CALLS * 0.1 / 1e3  # 100 runs of 0.1 ms
    for glance_ms, screen_seconds in ((0.1, fast_screen), (10.0, kernel_timing.SCREEN[0])):
        monkeypatch.setattr(kernel_timing.bench, "glance_ms", lambda *_, ms=glance_ms: ms)
        seconds.clear()
        quantize(*net, Recipe())
        assert seconds and seconds[0::2] == pytest.approx([screen_seconds] * (len(seconds) // 2))
        assert seconds[1::2] == [kernel_timing.CONFIRMATION[0]] * (len(seconds) // 2)


def tiles_timings(ms: list[tuple[float, float]]):
    """A stand-in for the two INT8 forms' measurement: (symmetric, tiles) ms in turn."""
    calls = iter(ms)

    def compare_sessions(models, feeds, threads, seconds, rounds, min_block):
        assert list(models) == ["symmetric", "tiles"]
        symmetric, tiles = next(calls)
        return {"symmetric": {"latency_ms_p50": symmetric}, "tiles": {"latency_ms_p50": tiles}}

    return compare_sessions


@pytest.mark.parametrize(
    "ms, taken",
    [
        ([(1.0, 0.6), (1.0, 0.6)], True),
        ([(1.0, 0.97), (1.0, 0.97)], False),  # within TILES_MARGIN: ORT's default kernel stays
        ([(1.0, 0.6), (1.0, 1.1)], False),  # the confirmation does not bear the screen out
    ],
)
def test_a_large_conv_goes_on_amx_tiles_where_both_measurements_find_them_faster(
    monkeypatch, ms, taken
):
    model = conv_net(channels=64)
    graph = ir.serde.deserialize_model(model)
    monkeypatch.setattr(kernel_timing.bench, "glance_ms", lambda *_: 1.0)
    monkeypatch.setattr(kernel_timing.bench, "compare_sessions", tiles_timings(ms))
    nodes = {n.name for n in graph.graph if n.op_type in ("Conv", "Relu", "Add", "Gemm")}
    int8 = target.WEIGHT_FORMATS["int8"]
    chosen = kernel_timing.faster_on_amx_tiles(model, graph, nodes, {"x": images(4)}, int8)
    assert chosen == ({"conv2"} if taken else set())  # conv1's 3 x 3 x 3 inputs: never timed


def test_convs_found_faster_on_amx_tiles_are_stored_for_them_and_timed_so_against_fp32(
    tmp_path, monkeypatch
):
    """On an AMX CPU (stood in for): what the tiles' timing finds reaches the model, its
    decisions and its summary, and the INT8-FP32 verdicts time those Convs on the tiles."""
    onnx.save(conv_net(channels=64), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    monkeypatch.setattr(pipeline, "host_target", lambda: "amx")
    monkeypatch.setattr(kernel_timing, "faster_on_amx_tiles", lambda *a: {"conv2"})
    timed_on_tiles = []
    monkeypatch.setattr(
        kernel_timing, "slower_in_int8", lambda *a: timed_on_tiles.append(a[-1]) or {}
    )
    made = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", Recipe(target="amx"))
    assert timed_on_tiles == [frozenset({"conv2"})]
    weights = {i.name: i for i in made.model.graph.initializer}
    assert onnx.numpy_helper.to_array(weights["conv2_weight_zero_point"]).tolist() == [-1] * 64
    assert not onnx.numpy_helper.to_array(weights["conv1_weight_zero_point"]).any()
    reasons = {d.name: d.reason for d in made.decisions if d.precision == "int8"}
    assert reasons["conv2"].startswith("on AMX tiles") and reasons["conv1"] == ""
    assert summarize(made)["weights"]["amx_tile_convs"] == 1
