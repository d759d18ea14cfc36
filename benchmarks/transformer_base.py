"""Transformer-base (6+6 layers, d_model 512, 8 heads, FFN 2048, 32k vocabulary), random
weights: FP32 as exported and after quantize's clean-up (the baseline) vs INT8 per graph (ours
with the transformer recipe, ORT quantize_dynamic, ORT quantize_static on MatMul/Gemm with
percentile ranges), the encoder at batch 16 x 64 tokens as in REFERENCE section 7, and a
decoder step (batch 16, 32 cached positions, 64 source positions, 32k-way logits).

`python -m benchmarks.transformer_base` writes benchmarks/results/transformer_base_TARGET.json/.md
(TARGET: this CPU's INT8 path).
Calibration: 32 random-token feeds per graph (the recipe's ranges, not accuracy, are what
random weights can exercise; accuracy is measured on the trained translator).
"""

import tempfile
from pathlib import Path

import numpy as np
import onnx

from benchmarks.results import for_this_cpu, sized, write_results
from benchmarks.rivals import ort_quantize_dynamic, ort_quantize_static
from models.translator.export import cache_names, export
from models.translator.network import BASE
from models.translator.train import build_model
from quantize.bench import compare_sessions
from quantize.pipeline import quantize
from quantize.recipe import Recipe
from quantize.runtime import session
from quantize.target import host_isa
from quantize.validate import sqnr_db

BATCH, SOURCE, CACHED = 16, 64, 32


def feeds(graph: str, rng: np.random.Generator, count: int, encoder: onnx.ModelProto) -> list[dict]:
    """Random-token encoder feeds, or decoder-step feeds on the encoder's real outputs."""
    c, sess = BASE, session(encoder)
    out = []
    for _ in range(count):
        source = {"source": rng.integers(4, c.vocab, (BATCH, SOURCE)).astype(np.int32)}
        if graph == "encoder":
            out.append(source)
            continue
        context = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, source)))
        past = {
            n: rng.normal(0, 1, (BATCH, c.heads, CACHED, c.depth)).astype(np.float32)
            for n in cache_names("past", c.decoder_layers)
        }
        out.append(
            {
                "token": rng.integers(4, c.vocab, (BATCH, 1)).astype(np.int32),
                "position": np.full((BATCH, 1), CACHED, np.int32),
                **past,
                **context,
            }
        )
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        encoder_path, decoder_path = export(build_model(BASE), Path(tmp))
        graphs = {"encoder": onnx.load(encoder_path), "decoder": onnx.load(decoder_path)}
        paths = {"encoder": encoder_path, "decoder": decoder_path}
        data = {
            "isa": host_isa(),
            "setup": {
                "batch": BATCH,
                "source_positions": SOURCE,
                "cached_positions": CACHED,
                "config": BASE.__dict__,
            },
        }
        for name, fp32 in graphs.items():
            calib = feeds(name, rng, sized(32, 4), graphs["encoder"])
            bench_feed = feeds(name, rng, 1, graphs["encoder"])[0]
            ours = quantize(paths[name], calib, Recipe.transformer())
            models = {
                "fp32": fp32,
                "fp32_clean": ours.fp32_model,
                "ours": ours.model,
                "ort_dynamic": ort_quantize_dynamic(fp32),
                "ort_static": ort_quantize_static(fp32, calib, transformer=True),
            }
            data.setdefault("attention_fused", {})[name] = {
                "softmax_as_exported": _count(fp32, "Softmax"),
                "fused_attention_after_cleanup": sum(
                    _count(ours.fp32_model, op) for op in ("MultiHeadAttention", "Attention")
                ),
            }
            speed = compare_sessions(models, bench_feed, threads=0, min_seconds=sized(12, 0.5))
            reference = session(fp32).run(None, bench_feed)[0]
            data[name] = {
                variant: {
                    "per_s": speed[variant]["throughput"],
                    "vs_fp32_clean": speed[variant]["throughput"]
                    / speed["fp32_clean"]["throughput"],
                    "vs_fp32": speed[variant]["throughput"] / speed["fp32"]["throughput"],
                    "p50_ms": speed[variant]["latency_ms_p50"],
                    "output_sqnr_db": sqnr_db(reference, session(m).run(None, bench_feed)[0]),
                }
                for variant, m in models.items()
            }
    write_results(for_this_cpu("transformer_base"), data, _markdown(data))
    print(_markdown(data))


def _count(model: onnx.ModelProto, op_type: str) -> int:
    return sum(node.op_type == op_type for node in model.graph.node)


def _markdown(d: dict) -> str:
    lines = [
        f"# Transformer-base, random weights ({d['isa']['cpu']}, {d['isa']['int8_gemm_path']}, all cores)",
        "",
    ]
    for graph, unit in (
        ("encoder", f"sequences/s (batch {BATCH} x {SOURCE} tokens)"),
        ("decoder", f"step rows/s (batch {BATCH}, {CACHED} cached)"),
    ):
        lines += [
            f"## {graph}: {unit}",
            "",
            "| variant | per s | x FP32 after clean-up | x FP32 as exported | p50 ms | output SQNR dB |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {v} | {r['per_s']:.1f} | {r['vs_fp32_clean']:.2f} | {r['vs_fp32']:.2f} | {r['p50_ms']:.1f} "
            f"| {r['output_sqnr_db']:.1f} |"
            for v, r in d[graph].items()
        ]
        lines.append("")
    fused = d["attention_fused"]
    lines += [
        "Attention the clean-up fused (into MultiHeadAttention, then ONNX Attention): "
        + ", ".join(
            f"{graph} {f['fused_attention_after_cleanup']} (Softmaxes as exported: "
            f"{f['softmax_as_exported']})"
            for graph, f in fused.items()
        )
        + ".",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
