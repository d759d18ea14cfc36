"""`python -m benchmarks.step_attention`: would a decoder step run faster with its attention
fused into ONNX Runtime's MultiHeadAttention? FuseAttentionPass fuses the encoders' attention
but not a step's, whose keys and values come from a cache; this measures what fusing it would
buy before the pass takes the form.

One decoder layer's step attention, as the translator's step graph writes it (the query of one
position reshaped to (B, H, 1, D), the cache grown by a Concat, MatMul, Softmax, MatMul; then
cross-attention to the encoder's cached keys and values under the source padding bias), against
the same work as two MultiHeadAttention nodes (past_key and past_value in, present out; the
cross keys and values in their (B, H, S, D) layout). The shapes are the translator's at two
cache lengths and Transformer-base's decoder step; threads 1 (a batcher stream) and all cores.
Writes benchmarks/results/step_attention_TARGET.{json,md}.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper

from benchmarks.results import for_this_cpu, sized, write_results
from quantize.bench import compare_sessions
from quantize.runtime import session
from quantize.target import host_isa

# name: batch, heads, head size, cached positions, source positions
SHAPES = {
    "translator, 16 cached": (64, 4, 64, 16, 30),
    "translator, 48 cached": (64, 4, 64, 48, 30),
    "Transformer-base, 32 cached": (16, 8, 64, 32, 64),
}
INPUTS = ("query", "key", "value", "past_key", "past_value", "cross_key", "cross_value", "bias")
OUTPUTS = ("context", "present_key", "present_value")


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


def step_graph(nodes: list[onnx.NodeProto], shape: tuple[int, ...]) -> onnx.ModelProto:
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
        "flat": [-1, hidden],
        "one_row": [-1, 1, hidden],
    }
    graph = helper.make_graph(
        nodes,
        "step_attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims[n]) for n in INPUTS],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims[n]) for n in OUTPUTS],
        [
            helper.make_tensor(n, TensorProto.INT64, [len(v)], v)
            for n, v in constants.items()
            if any(n in node.input for node in nodes)
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def step_feeds(graph: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {
        i.name: rng.normal(size=[d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in graph.graph.input
    }
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
        }
        feeds = step_feeds(graphs["written_out"], rng)
        outputs = {k: session(g).run(None, feeds) for k, g in graphs.items()}
        entry = {
            "batch_heads_depth_cached_source": shape,
            "max_abs_difference": max(
                float(np.abs(a - b).max()) for a, b in zip(*outputs.values())
            ),
        }
        for threads in (1, 0):
            speed = compare_sessions(graphs, feeds, threads=threads, min_seconds=sized(4, 0.3))
            entry[f"threads_{threads or 'all'}"] = {
                k: {"p50_ms": v["latency_ms_p50"]} for k, v in speed.items()
            } | {"fused_speedup": speed["fused"]["throughput"] / speed["written_out"]["throughput"]}
        data["shapes"][name] = entry
    write_results(for_this_cpu("step_attention"), data, _markdown(data))
    print(_markdown(data))


def _markdown(d: dict) -> str:
    lines = [
        f"# A decoder step's attention, written out vs MultiHeadAttention ({d['isa']['cpu']}, "
        f"{d['isa']['int8_gemm_path']})",
        "",
        "One layer: self-attention over the cache grown by one position, then cross-attention.",
        "",
        "| shape | threads | written out p50 ms | MultiHeadAttention p50 ms | fused speed-up "
        "| max abs difference |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in d["shapes"].items():
        for threads in ("1", "all"):
            t = e[f"threads_{threads}"]
            lines.append(
                f"| {name} | {threads} | {t['written_out']['p50_ms']:.3f} "
                f"| {t['fused']['p50_ms']:.3f} | {t['fused_speedup']:.2f}x "
                f"| {e['max_abs_difference']:.1e} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
