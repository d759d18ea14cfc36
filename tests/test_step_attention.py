"""benchmarks.step_attention: its four forms of a decoder step's attention compute one thing."""

import numpy as np

from benchmarks.step_attention import (
    SHAPES,
    cache_scales,
    fused,
    int8_cached,
    int8_feeds,
    onnx_attention,
    step_feeds,
    step_graph,
    written_out,
)
from quantize.runtime import session


def test_the_int8_cache_grows_as_the_float_cache_rounded_and_attends_within_its_rounding():
    shape = SHAPES["translator, 16 cached"]
    graph = step_graph(written_out(), shape)
    feeds = step_feeds(graph, np.random.default_rng(0))
    scales = cache_scales(feeds)
    context, present_key, present_value = session(graph).run(None, feeds)
    got = session(step_graph(int8_cached(), shape, scales)).run(None, int8_feeds(feeds, scales))

    def rounded(cache, scale):
        return np.clip(np.round(cache / scale), -127, 127).astype(np.int8)

    assert got[1].dtype == np.int8 and got[1].shape == (64, 4, 64, 17)  # keys (B, H, D, T)
    assert np.array_equal(
        got[1], rounded(present_key, scales["self_key_scale"]).transpose(0, 1, 3, 2)
    )
    assert np.array_equal(got[2], rounded(present_value, scales["self_value_scale"]))
    error = np.sqrt(np.mean((got[0] - context) ** 2) / np.mean(context**2))
    assert 0 < error < 0.15


def test_multi_head_attention_and_onnx_attention_attend_and_grow_the_cache_as_written_out():
    shape = SHAPES["Transformer-base, 32 cached"]
    graph = step_graph(written_out(), shape)
    feeds = step_feeds(graph, np.random.default_rng(1))
    context, present_key, present_value = session(graph).run(None, feeds)
    for form in (fused(shape[1]), onnx_attention()):
        got = session(step_graph(form, shape)).run(None, feeds)
        assert np.allclose(got[0], context, atol=1e-5)
        assert np.array_equal(got[1], present_key) and np.array_equal(got[2], present_value)
