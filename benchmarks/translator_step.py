"""`python -m benchmarks.translator_step`: where a decoder step of the reference translator
spends its time, in INT8 and FP32: the measured part of "what it would take" to pull ahead of
CTranslate2 int8 (benchmarks/translator.py).

Our INT8 decoder (`Recipe.transformer()`, calibrated as benchmarks.translator calibrates it) and
the cleaned FP32 one, one thread each (a batcher stream), on a real step: ROWS test sentences
translated greedily up to CACHED positions. The step's median time, and ORT's per-node profile
of each step grouped by what the nodes do (the profiler's own cost per node inflates the small
ones; the shares are for ranking, the medians for time).

Writes benchmarks/results/translator_step_TARGET.json and .md (TARGET: this CPU's INT8 path).
"""

import collections
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.results import for_this_cpu, sized, write_results
from benchmarks.translator import MAX_BATCH
from models.translator.build import calibration_sentences, map_graphs, quantize_translator
from models.translator.corpus import build_corpus, read_split
from models.translator.evaluate import calibration_feeds
from models.translator.translate import Translator, TranslatorFiles, default_folder
from onnxio import cpu_session
from quantize.batcher import pack
from quantize.bench import compare
from quantize.pipeline import cleaned_fp32
from quantize.recipe import Recipe
from quantize.target import host_isa

ROWS = 64
CACHED = 16
SECONDS = sized(6.0, 1.0)
PROFILED_STEPS = sized(200, 20)
TRANSLATED = sized(600, 64)
TOKEN_BUDGET = 1024  # the best setting of ours and FP32 in benchmarks/translator.py
GROUPS = {
    "weight products in INT8 (QGemm, MatMulIntegerToFloat)": ("QGemm", "MatMulIntegerToFloat"),
    "weight products in FP32 (Gemm)": ("Gemm",),
    "attention products (MatMul, FusedMatMul)": ("MatMul", "FusedMatMul"),
    "cache growth (Concat)": ("Concat",),
    "Softmax": ("Softmax",),
    "LayerNorm": ("LayerNormalization", "SkipLayerNormalization"),
    "activation quantization (QuantizeLinear)": ("QuantizeLinear",),
}


def main() -> None:
    base = TranslatorFiles.in_folder(default_folder())
    feeds = calibration_feeds(base, calibration_sentences())
    translators = {
        "fp32_clean": map_graphs(base, ".clean", lambda graph, path: cleaned_fp32(path)),
        "ours": quantize_translator(base, Recipe.transformer(), feeds)[0],
    }
    step = _real_step(base)
    rows = len(step["token"])
    sessions = {name: cpu_session(t.decoder, threads=1) for name, t in translators.items()}
    timed = compare(
        {name: (lambda s=s: s.run(None, step)) for name, s in sessions.items()}, rows, SECONDS
    )
    data = {
        "rows": rows,
        "cached": CACHED,
        "threads": 1,
        "step_ms": {name: t["latency_ms_p50"] for name, t in timed.items()},
        "profile": {name: _profile(t.decoder, step) for name, t in translators.items()},
        "translated": TRANSLATED,
        "token_budget": TOKEN_BUDGET,
        "translation": {name: _translation_split(t) for name, t in translators.items()},
    }
    markdown = _markdown(data)
    write_results(for_this_cpu("translator_step"), data, markdown)
    print(markdown)


def _real_step(files: TranslatorFiles) -> dict[str, np.ndarray]:
    """The FP32 decoder's feed at position CACHED while greedily translating ROWS test sentences
    long enough to be still running there (source lengths 20 to 60 tokens)."""
    translator = Translator(files, threads=1)
    english = [p.english for p in read_split(build_corpus(), "test")]
    lengths = translator.token_lengths(english)
    chosen = [text for text, n in zip(english, lengths) if 20 <= n <= 60][:ROWS]
    found: list[dict] = []

    def keep(graph: str, feed: dict) -> None:
        if graph == "decoder" and int(feed["position"][0, 0]) == CACHED and not found:
            found.append(dict(feed))

    translator.observe = keep
    translator(chosen)
    return found[0]


def _profile(model: Path, feed: dict) -> dict[str, float]:
    """Each group's share of the kernel time ORT's profiler records over PROFILED_STEPS runs."""
    with tempfile.TemporaryDirectory() as tmp:
        session = cpu_session(model, threads=1, profile_prefix=Path(tmp) / "step")
        for _ in range(PROFILED_STEPS):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    spent: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event["args"]["op_name"]
            group = next((g for g, ops in GROUPS.items() if op in ops), "everything else")
            spent[group] += event["dur"]
    total = sum(spent.values())
    return {group: spent[group] / total for group in [*GROUPS, "everything else"]}


def _translation_split(files: TranslatorFiles) -> dict[str, float]:
    """Shares of the wall time of translating TRANSLATED test sentences, packed as the batcher
    packs them: encoder runs, decoder runs, and the rest (greedy search, tokenizer)."""
    translator = Translator(files, threads=1)
    english = [p.english for p in read_split(build_corpus(), "test")[:TRANSLATED]]
    batches = pack(translator.token_lengths(english), TOKEN_BUDGET, MAX_BATCH)
    spent: collections.Counter = collections.Counter()
    for graph in ("encoder", "decoder"):
        setattr(translator, graph, _Timed(getattr(translator, graph), graph, spent))
    translator([english[i] for i in batches[0]])  # warm
    spent.clear()
    start = time.perf_counter()
    for batch in batches:
        translator([english[i] for i in batch])
    total = time.perf_counter() - start
    parts = {"encoder runs": spent["encoder"], "decoder runs": spent["decoder"]}
    return {**{k: v / total for k, v in parts.items()}, "the rest": 1 - sum(parts.values()) / total}


class _Timed:
    """A session whose runs add their time to `spent[name]`."""

    def __init__(self, session, name: str, spent: collections.Counter):
        self.session, self.name, self.spent = session, name, spent

    def run(self, *args):
        start = time.perf_counter()
        out = self.session.run(*args)
        self.spent[self.name] += time.perf_counter() - start
        return out


def _markdown(d: dict) -> str:
    isa = host_isa()
    names = {"fp32_clean": "FP32 after clean-up", "ours": "quantize INT8"}
    groups = list(d["profile"]["ours"])
    profile = "\n".join(
        f"| {group} | " + " | ".join(f"{100 * d['profile'][n][group]:.1f} %" for n in names) + " |"
        for group in groups
    )
    split = "\n".join(
        f"| {part} | "
        + " | ".join(f"{100 * d['translation'][n][part]:.1f} %" for n in names)
        + " |"
        for part in d["translation"]["ours"]
    )
    ms = d["step_ms"]
    return f"""# Translator: where a decoder step spends its time ({isa["cpu"]}, {isa["int8_gemm_path"]})

One decoder step at {d["rows"]} sentences with {d["cached"]} cached positions, one thread (one
batcher stream), median: FP32 after clean-up {ms["fp32_clean"]:.2f} ms, quantize INT8
{ms["ours"]:.2f} ms ({ms["fp32_clean"] / ms["ours"]:.2f}x).

Share of the step's kernel time (ORT's profiler):

| nodes | {" | ".join(names.values())} |
|---|---|---|
{profile}

Share of the wall time of translating {d["translated"]} test sentences (token budget
{d["token_budget"]}, one thread):

| part | {" | ".join(names.values())} |
|---|---|---|
{split}
"""


if __name__ == "__main__":
    main()
