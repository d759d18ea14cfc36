"""`narrowed_to_readers`: a tensor only SiLUs or hard-swishes read is clipped below where they
are flat."""

import math

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from graphs import image_model, images
from onnx import helper, numpy_helper

from quantize import MinMax, Recipe, passes, quantize
from quantize.reader_ranges import (
    CLIPPED_ERROR,
    HARD_SWISH_ZERO,
    SILU_ARGMIN,
    narrowed_to_readers,
)
from quantize.validate import layer_sqnr


def dead_channel_net(
    dead_channel_bias: float = -60.0, extra_reader: bool = False, hard_swish: bool = False
) -> onnx.ModelProto:
    """x -> Conv (one channel biased far below zero, as a trained net's dead channels are) ->
    SiLU as torch.onnx writes it (c * Sigmoid(c)), or a HardSwish -> Conv -> y [+ the first
    Conv's output]."""
    rng = np.random.default_rng(3)
    bias = np.zeros(8, np.float32)
    bias[0] = dead_channel_bias
    activation = (
        [helper.make_node("HardSwish", ["c"], ["m"], name="mul")]  # named as the SiLU's last node
        if hard_swish
        else [
            helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
            helper.make_node("Mul", ["c", "s"], ["m"], name="mul"),
        ]
    )
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], name="conv1"),
        *activation,
        helper.make_node("Conv", ["m", "w2"], ["y" if not extra_reader else "d"], name="conv2"),
    ]
    if extra_reader:
        nodes.append(helper.make_node("Add", ["d", "c"], ["y"], name="add"))
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(bias, "b1"),
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 8, 1, 1)).astype(np.float32), "w2"),
    ]
    return image_model(nodes, inits, "dead_channel", y_channels=8)


def _silu(x: float) -> float:
    return x / (1 + math.exp(-x))


def _cleaned(proto: onnx.ModelProto) -> ir.Model:
    return passes.cleanup(ir.serde.deserialize_model(proto))


ALL = {"conv1", "sigmoid", "mul", "conv2", "add"}


def test_a_silu_input_is_clipped_where_the_silu_is_a_quarter_step_from_zero():
    ranges = {"c": (-30.0, 6.0), "s": (0.0, 1.0), "m": (-0.28, 6.0)}
    lo, hi = narrowed_to_readers(_cleaned(dead_channel_net()), ALL, ranges)["c"]
    step = (6.0 + 0.28) / 255
    assert hi == 6.0 and -10 < lo < SILU_ARGMIN
    assert _silu(lo) == pytest.approx(-CLIPPED_ERROR * step, rel=1e-6)


def test_a_range_already_inside_the_visible_part_or_a_coarse_output_keeps_its_bounds():
    model = _cleaned(dead_channel_net())
    visible = {"c": (-3.0, 6.0), "m": (-0.28, 6.0)}
    assert narrowed_to_readers(model, ALL, visible)["c"] == (-3.0, 6.0)
    coarse = {"c": (-30.0, 600.0), "m": (-0.28, 600.0)}  # a quarter step exceeds SiLU's dip
    assert narrowed_to_readers(model, ALL, coarse)["c"] == (SILU_ARGMIN, 600.0)


def test_a_hard_swish_input_is_clipped_at_minus_three_where_the_hard_swish_is_zero():
    model = _cleaned(dead_channel_net(hard_swish=True))
    assert narrowed_to_readers(model, ALL, {"c": (-30.0, 6.0)})["c"] == (HARD_SWISH_ZERO, 6.0)
    assert narrowed_to_readers(model, ALL, {"c": (-2.0, 6.0)})["c"] == (-2.0, 6.0)


@pytest.mark.parametrize(
    ("model", "nodes"),
    [
        (dead_channel_net(extra_reader=True), ALL),  # an Add reads the tail too
        (
            dead_channel_net(),
            ALL - {"mul"},
        ),  # the SiLU runs in float: its input's grid is all that counts
        (dead_channel_net(hard_swish=True, extra_reader=True), ALL),
        (dead_channel_net(hard_swish=True), ALL - {"mul"}),
    ],
)
def test_a_tensor_another_reader_sees_keeps_its_tail(model, nodes):
    ranges = {"c": (-30.0, 6.0), "s": (0.0, 1.0), "m": (-0.28, 6.0)}
    assert narrowed_to_readers(_cleaned(model), nodes, ranges)["c"] == (-30.0, 6.0)


@pytest.mark.parametrize("hard_swish", [False, True])
def test_clipping_the_dead_tail_makes_the_int8_model_more_faithful(
    tmp_path, monkeypatch, hard_swish
):
    onnx.save(dead_channel_net(hard_swish=hard_swish), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(64))
    recipe = Recipe(ranges=MinMax(), kernel_timing=False, bias_correction=False)

    def sqnr() -> float:
        result = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", recipe)
        assert {d.name: d.precision for d in result.decisions}["mul"] == "int8"
        return min(result.output_sqnr_db.values())

    narrowed = sqnr()
    monkeypatch.setattr("quantize.plan.narrowed_to_readers", lambda model, nodes, ranges: ranges)
    # measured: SiLU 31.5 against 24.9 dB, hard-swish 31.6 against 24.6 dB
    assert narrowed > sqnr() + 4


def test_a_clipped_tensor_is_judged_by_its_rounding_against_fp32_clipped_the_same(tmp_path):
    onnx.save(dead_channel_net(), str(tmp_path / "silu.onnx"))
    np.save(tmp_path / "x.npy", images(64))
    recipe = Recipe(ranges=MinMax(), kernel_timing=False, bias_correction=False)
    result = quantize(tmp_path / "silu.onnx", tmp_path / "x.npy", recipe)
    assert result.floors.keys() == {"c"} and -10 < result.floors["c"] < SILU_ARGMIN
    assert result.layer_sqnr_db["c"] > 30  # measured: 41.9 dB
    unclipped = layer_sqnr(result.fp32_model, result.model, {}, result.held_out[0])
    assert unclipped["c"] < 10  # the dead channel's -60 against the floor: measured 1.1 dB
