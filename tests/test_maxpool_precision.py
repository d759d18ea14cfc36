"""A MaxPool ORT would run on uint8 in its slow NCHW kernel stays FP32
(`coverage.nchw_uint8_maxpools`, the pipeline's island loop); one it runs in NHWC next to its
integer convolutions stays INT8."""

import numpy as np
import onnx
from graphs import _init, images, images_to
from onnx import helper

from quantize import Recipe, RunOptions, quantize
from quantize.coverage import nchw_uint8_maxpools, optimized_graph
from quantize.pipeline import NCHW_MAXPOOL


def pooled_head(hard_swish: bool) -> onnx.ModelProto:
    """x (N,3,16,16) -> Conv -> [hard-swish written out, x * clip(x + 3, 0, 6) / 6, as
    Paddle2ONNX exports it] -> MaxPool 2x2 -> GlobalAveragePool -> Flatten -> y (N,8): the tail of
    the PP-OCR direction classifier."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4, name="conv")]
    pooled_input = "c"
    if hard_swish:
        nodes += [
            helper.make_node("Add", ["c", "three"], ["shifted"], name="plus3"),
            helper.make_node("Clip", ["shifted", "zero", "six"], ["gate"], name="relu6"),
            helper.make_node("Mul", ["c", "gate"], ["gated"], name="times"),
            helper.make_node("Div", ["gated", "six"], ["swish"], name="div6"),
        ]
        pooled_input = "swish"
    nodes += [
        helper.make_node(
            "MaxPool", [pooled_input], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"
        ),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["y"], name="flat"),
    ]
    inits = [
        _init("w", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)),
        _init("b", rng.normal(0, 0.1, 8).astype(np.float32)),
        _init("three", np.float32(3)),
        _init("zero", np.float32(0)),
        _init("six", np.float32(6)),
    ]
    return images_to(nodes, inits, "pooled", [8])


def quantized(tmp_path, hard_swish: bool):
    onnx.save(pooled_head(hard_swish), tmp_path / "net.onnx")
    np.save(tmp_path / "x.npy", images(80))
    result = quantize(
        tmp_path / "net.onnx",
        tmp_path / "x.npy",
        Recipe(kernel_timing=False, bias_correction=False),
        RunOptions(calib_samples=64),
    )
    pool = next(d for d in result.decisions if d.name == "pool")
    return pool, result, optimized_graph(result.model)


def producer_of(graph: onnx.GraphProto, tensor: str) -> onnx.NodeProto:
    (producer,) = [n for n in graph.node if tensor in n.output]
    return producer


def test_a_maxpool_after_a_written_out_hard_swish_stays_fp32_and_ort_runs_it_in_float(tmp_path):
    pool, result, executed = quantized(tmp_path, hard_swish=True)
    assert (pool.precision, pool.reason) == ("fp32", NCHW_MAXPOOL)
    (maxpool,) = [n for n in executed.node if n.op_type == "MaxPool"]
    producer = producer_of(executed, maxpool.input[0])
    if producer.op_type == "ReorderInput":  # ORT's NCHWc layout, taken on AVX2 for 8 channels
        producer = producer_of(executed, producer.input[0])
    assert producer.op_type == "DequantizeLinear"
    int8 = {d.name for d in result.decisions if d.precision == "int8"}
    assert {"conv", "div6", "gap"} <= int8  # div6: the fused HardSwish
    assert min(result.output_sqnr_db.values()) > 25


def test_a_maxpool_that_ort_runs_in_nhwc_after_its_integer_conv_stays_int8(tmp_path):
    pool, _, executed = quantized(tmp_path, hard_swish=False)
    assert pool.precision == "int8"
    assert "NhwcMaxPool" in {n.op_type for n in executed.node}


def test_only_a_planned_maxpool_not_fed_by_a_dequantize_counts():
    nodes = [
        helper.make_node("MaxPool", ["u8"], ["a"], name="on_uint8"),
        helper.make_node("DequantizeLinear", ["u8", "s", "z"], ["f"], name="dq"),
        helper.make_node("MaxPool", ["f"], ["b"], name="in_float"),
        helper.make_node("NhwcMaxPool", ["u8"], ["c"], name="nhwc", domain="com.microsoft"),
    ]
    graph = helper.make_graph(nodes, "g", [], [])
    assert nchw_uint8_maxpools(graph, {"on_uint8", "in_float", "nhwc"}) == {"on_uint8"}
    assert nchw_uint8_maxpools(graph, {"in_float"}) == set()
