"""`python -m benchmarks.step_attention`: would a decoder step run faster with its attention
fused into ONNX Runtime's MultiHeadAttention, or into the ONNX Attention op? FuseAttentionPass
fuses the encoders' attention but not a step's, whose keys and values come from a cache; this
measures what fusing it would buy before the pass takes the form.

One decoder layer's step attention, as the translator's step graph writes it (the query of one
position reshaped to (B, H, 1, D), the cache grown by a Concat, MatMul, Softmax, MatMul; then
cross-attention to the encoder's cached keys and values under the source padding bias), against:
- the same work as two MultiHeadAttention nodes (past_key and past_value in, present out; the
  cross keys and values in their (B, H, S, D) layout);
- the same work as two ONNX Attention nodes of opset 23 (the same cache inputs and outputs; the
  padding bias as the cross-attention's attn_mask), which ORT runs faster than
  MultiHeadAttention on an encoder's masked self-attention (`ort_fusions`);
- the written-out form over an INT8 cache: every cached key and value int8 (per-tensor static
  scales; 7 bits where the target's kernels saturate), the new ones quantized into it, each
  product a MatMulIntegerToFloat of the quantized query or attention weights with the int8
  cache, the keys stored (B, H, D, positions) so that no Transpose copies them. It moves a
  quarter of the bytes; its outputs differ from FP32's by its rounding (the context's RMS error
  over its RMS, on these random feeds).

The shapes are the translator's at two cache lengths and Transformer-base's decoder step;
threads 1 (a batcher stream) and all cores.
Writes benchmarks/results/step_attention_TARGET.{json,md}.
"""

from functools import partial

import numpy as np
import onnx
from onnx import TensorProto, helper

from benchmarks.results import for_this_cpu, sized, write_results
from quantize.bench import compare
from quantize.passes.onnx_attention import ATTENTION_IR_VERSION, ATTENTION_OPSET
from quantize.runtime import session
from quantize.target import host_isa, host_target, saturates

# name: batch, heads, head size, cached positions, source positions
SHAPES = {
    "translator, 16 cached": (64, 4, 64, 16, 30),
    "translator, 48 cached": (64, 4, 64, 48, 30),
    "Transformer-base, 32 cached": (16, 8, 64, 32, 64),
}
INPUTS = ("query", "key", "value", "past_key", "past_value", "cross_key", "cross_value", "bias")
OUTPUTS = ("context", "present_key", "present_value")
CACHE = ("past_key", "past_value", "cross_key", "cross_value", "present_key", "present_value")
KEYS = ("past_key", "cross_key", "present_key")  # stored (B, H, D, positions) in an INT8 cache


def written_out() -> list[onnx.NodeProto]:
    make = helper.make_node
    return [
        *(make("Reshape", [n, "heads_one"], [f"{n}4"]) for n in ("query", "key", "value")),
        make("Concat", ["past_key", "key4"], ["present_key"], axis=2),
        make("Concat", ["past_value", "value4"], ["present_value"], axis=2),
        make("Transpose", ["present_key"], ["keys_t"], perm=[0, 1, 3, 2]),
        make("MatMul", ["query4", "keys_t"], ["scores"]),
        make("Softmax", ["scores"], ["weights"], axis=-1),
        make("MatMul", ["weights", "present_value"], ["self4"]),
        make("Reshape", ["self4", "flat"], ["self"]),
        make("Reshape", ["self", "heads_one"], ["cross_query4"]),
        make("Transpose", ["cross_key"], ["cross_t"], perm=[0, 1, 3, 2]),
        make("MatMul", ["cross_query4", "cross_t"], ["cross_scores"]),
        make("Add", ["cross_scores", "bias"], ["cross_biased"]),
        make("Softmax", ["cross_biased"], ["cross_weights"], axis=-1),
        make("MatMul", ["cross_weights", "cross_value"], ["cross4"]),
        make("Reshape", ["cross4", "flat"], ["context"]),
    ]


def fused(heads: int) -> list[onnx.NodeProto]:
    make = helper.make_node

    def attention(inputs, outputs):
        return make(
            "MultiHeadAttention",
            inputs,
            outputs,
            domain="com.microsoft",
            num_heads=heads,
            scale=1.0,
        )

    return [
        *(make("Reshape", [n, "one_row"], [f"{n}3"]) for n in ("query", "key", "value")),
        attention(
            ["query3", "key3", "value3", "", "", "", "past_key", "past_value"],
            ["self3", "present_key", "present_value"],
        ),
        make("Reshape", ["self3", "flat"], ["self"]),
        make("Reshape", ["self", "one_row"], ["cross_query3"]),
        attention(["cross_query3", "cross_key", "cross_value", "", "", "bias"], ["cross3"]),
        make("Reshape", ["cross3", "flat"], ["context"]),
    ]


def onnx_attention() -> list[onnx.NodeProto]:
    make = helper.make_node
    return [
        *(make("Reshape", [n, "heads_one"], [f"{n}4"]) for n in ("query", "key", "value")),
        make(
            "Attention",
            ["query4", "key4", "value4", "", "past_key", "past_value"],
            ["self4", "present_key", "present_value"],
            scale=1.0,
        ),
        make("Reshape", ["self4", "flat"], ["self"]),
        make("Reshape", ["self", "heads_one"], ["cross_query4"]),
        make(
            "Attention", ["cross_query4", "cross_key", "cross_value", "bias"], ["cross4"], scale=1.0
        ),
        make("Reshape", ["cross4", "flat"], ["context"]),
    ]


def int8_cached() -> list[onnx.NodeProto]:
    make = helper.make_node

    def product(a, b, a_scale, b_scale, a_zero, out):
        inputs = [a, b, a_scale, b_scale, a_zero, "zero_int8"]
        return make("MatMulIntegerToFloat", inputs, [out], domain="com.microsoft")

    def attention(query, keys, values, prefix, out, bias=None):
        """`out`, (B, hidden), of `query` (float, (B, hidden)) over the int8 `keys` and `values`,
        whose scales are `{prefix}key_scale` and `{prefix}value_scale`."""
        scale = f"{prefix}query_scale"
        scored = [f"{prefix}scores"] if bias is None else [f"{prefix}unbiased"]
        nodes = [
            make("QuantizeLinear", [query, scale, "zero_uint8"], [f"{prefix}query_q"]),
            make("Reshape", [f"{prefix}query_q", "heads_one"], [f"{prefix}query4"]),
            product(f"{prefix}query4", keys, scale, f"{prefix}key_scale", "zero_uint8", scored[0]),
        ]
        if bias is not None:
            nodes.append(make("Add", [scored[0], bias], [f"{prefix}scores"]))
        return nodes + [
            make("Softmax", [f"{prefix}scores"], [f"{prefix}weights"], axis=-1),
            make("QuantizeLinear", [f"{prefix}weights", "weight_scale"], [f"{prefix}weights_q"]),
            product(
                f"{prefix}weights_q",
                values,
                "weight_scale",
                f"{prefix}value_scale",
                "zero_weight",
                f"{prefix}context4",
            ),
            make("Reshape", [f"{prefix}context4", "flat"], [out]),
        ]

    return [
        make("QuantizeLinear", ["key", "self_key_scale", "zero_int8"], ["key_q"]),
        make("QuantizeLinear", ["value", "self_value_scale", "zero_int8"], ["value_q"]),
        make("Reshape", ["key_q", "heads_depth_one"], ["key4"]),
        make("Reshape", ["value_q", "heads_one"], ["value4"]),
        make("Concat", ["past_key", "key4"], ["present_key"], axis=3),
        make("Concat", ["past_value", "value4"], ["present_value"], axis=2),
        *attention("query", "present_key", "present_value", "self_", "self"),
        *attention("self", "cross_key", "cross_value", "cross_", "context", bias="bias"),
    ]


def cache_scales(feeds: dict[str, np.ndarray]) -> dict[str, float]:
    """Per-tensor static scales of an INT8 cache for `feeds` (float): the cache at 7 bits where
    this CPU's u8s8 kernels saturate, the uint8 queries at 8."""
    cache_levels = 63 if saturates(host_target()) else 127

    def scale(names, levels):
        return max(float(np.abs(feeds[n]).max()) for n in names) / levels

    return {
        "self_key_scale": scale(("past_key", "key"), cache_levels),
        "self_value_scale": scale(("past_value", "value"), cache_levels),
        "cross_key_scale": scale(("cross_key",), cache_levels),
        "cross_value_scale": scale(("cross_value",), cache_levels),
        "self_query_scale": scale(("query",), 127),
        # the cross-attention's query is a mix of value rows: the values bound it
        "cross_query_scale": scale(("past_value", "value"), 127),
    }


def int8_feeds(feeds: dict[str, np.ndarray], scales: dict[str, float]) -> dict[str, np.ndarray]:
    """`feeds` with the cache rounded to int8 at `scales`, the keys (B, H, D, positions)."""
    out = dict(feeds)
    for name in ("past_key", "past_value", "cross_key", "cross_value"):
        scale = scales[name.replace("past_", "self_") + "_scale"]
        q = np.clip(np.round(feeds[name] / scale), -127, 127).astype(np.int8)
        out[name] = np.ascontiguousarray(q.transpose(0, 1, 3, 2)) if name in KEYS else q
    return out


def step_graph(
    nodes: list[onnx.NodeProto], shape: tuple[int, ...], scales: dict[str, float] | None = None
) -> onnx.ModelProto:
    """The graph of `nodes` at `shape`; with `scales`, over an INT8 cache (int8_cached)."""
    batch, heads, depth, cached, source = shape
    hidden = heads * depth
    dims = {
        "query": [batch, hidden],
        "key": [batch, hidden],
        "value": [batch, hidden],
        "past_key": [batch, heads, cached, depth],
        "past_value": [batch, heads, cached, depth],
        "cross_key": [batch, heads, source, depth],
        "cross_value": [batch, heads, source, depth],
        "bias": [batch, 1, 1, source],
        "context": [batch, hidden],
        "present_key": [batch, heads, cached + 1, depth],
        "present_value": [batch, heads, cached + 1, depth],
    }
    constants = {
        "heads_one": [-1, heads, 1, depth],
        "heads_depth_one": [-1, heads, depth, 1],
        "flat": [-1, hidden],
        "one_row": [-1, 1, hidden],
    }
    initializers = [
        helper.make_tensor(n, TensorProto.INT64, [len(v)], v) for n, v in constants.items()
    ]
    if scales is not None:
        for name in KEYS:
            dims[name] = [*dims[name][:2], depth, dims[name][2]]
        initializers += [
            helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in scales.items()
        ]
        initializers += [
            helper.make_tensor("weight_scale", TensorProto.FLOAT, [], [1 / 255]),
            helper.make_tensor("zero_int8", TensorProto.INT8, [], [0]),
            helper.make_tensor("zero_uint8", TensorProto.UINT8, [], [128]),
            helper.make_tensor("zero_weight", TensorProto.UINT8, [], [0]),
        ]

    def value(name):
        cached_int8 = scales is not None and name in CACHE
        return helper.make_tensor_value_info(
            name, TensorProto.INT8 if cached_int8 else TensorProto.FLOAT, dims[name]
        )

    read = {i for node in nodes for i in node.input}
    graph = helper.make_graph(
        nodes,
        "step_attention",
        [value(n) for n in INPUTS],
        [value(n) for n in OUTPUTS],
        [i for i in initializers if i.name in read],
    )
    # ONNX Attention's opset; the other forms' ops read the same there
    opsets = [helper.make_opsetid("", ATTENTION_OPSET), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ATTENTION_IR_VERSION)


def step_feeds(graph: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Normal feeds, the query scaled by depth ** -0.5 as the translator's attention scales it."""
    feeds = {
        i.name: rng.normal(size=[d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in graph.graph.input
    }
    feeds["query"] *= feeds["past_key"].shape[-1] ** -0.5
    feeds["bias"] = np.zeros_like(feeds["bias"])
    feeds["bias"][::2, ..., -4:] = -1e9  # every other sentence padded by 4 positions
    return feeds


def main() -> None:
    rng = np.random.default_rng(0)
    data = {"isa": host_isa(), "shapes": {}}
    for name, shape in SHAPES.items():
        graphs = {
            "written_out": step_graph(written_out(), shape),
            "fused": step_graph(fused(heads=shape[1]), shape),
            "onnx_attention": step_graph(onnx_attention(), shape),
        }
        feeds = step_feeds(graphs["written_out"], rng)
        scales = cache_scales(feeds)
        graphs["int8_cache"] = step_graph(int8_cached(), shape, scales)
        inputs = dict.fromkeys(graphs, feeds) | {"int8_cache": int8_feeds(feeds, scales)}
        context = {k: session(g).run(["context"], inputs[k])[0] for k, g in graphs.items()}
        entry = {
            "batch_heads_depth_cached_source": shape,
            "max_abs_difference": {
                k: float(np.abs(context[k] - context["written_out"]).max())
                for k in ("fused", "onnx_attention")
            },
            "int8_cache_rms_relative_error": float(
                np.sqrt(
                    np.mean((context["int8_cache"] - context["written_out"]) ** 2)
                    / np.mean(context["written_out"] ** 2)
                )
            ),
        }
        for threads in (1, 0):
            runs = {k: partial(session(g, threads).run, None, inputs[k]) for k, g in graphs.items()}
            speed = compare(runs, shape[0], min_seconds=sized(6, 0.45), rounds=6)
            p50 = {k: v["latency_ms_p50"] for k, v in speed.items()}
            entry[f"threads_{threads or 'all'}"] = {k: {"p50_ms": v} for k, v in p50.items()} | {
                f"{k}_speedup": p50["written_out"] / p50[k]
                for k in ("fused", "onnx_attention", "int8_cache")
            }
        data["shapes"][name] = entry
    write_results(for_this_cpu("step_attention"), data, _markdown(data))
    print(_markdown(data))


def _markdown(d: dict) -> str:
    lines = [
        f"# A decoder step's attention: written out, as MultiHeadAttention, as ONNX Attention, "
        f"over an INT8 cache ({d['isa']['cpu']}, {d['isa']['int8_gemm_path']})",
        "",
        "One layer: self-attention over the cache grown by one position, then cross-attention.",
        "Speed-ups are over the written-out form (median latencies); max abs difference is the "
        "context's against the written-out form's.",
        "",
        "| shape | threads | written out p50 ms | MultiHeadAttention p50 ms | speed-up "
        "| max abs difference | ONNX Attention p50 ms | speed-up | max abs difference "
        "| INT8 cache p50 ms | speed-up | RMS error / RMS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in d["shapes"].items():
        for threads in ("1", "all"):
            t, diff = e[f"threads_{threads}"], e["max_abs_difference"]
            lines.append(
                f"| {name} | {threads} | {t['written_out']['p50_ms']:.3f} "
                f"| {t['fused']['p50_ms']:.3f} | {t['fused_speedup']:.2f}x | {diff['fused']:.1e} "
                f"| {t['onnx_attention']['p50_ms']:.3f} | {t['onnx_attention_speedup']:.2f}x "
                f"| {diff['onnx_attention']:.1e} | {t['int8_cache']['p50_ms']:.3f} "
                f"| {t['int8_cache_speedup']:.2f}x | {e['int8_cache_rms_relative_error']:.3f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
