"""Translator: FP32 vs INT8 (ours, ORT quantize_dynamic, ORT quantize_static), end to end.

`python -m benchmarks.translator` (needs `python -m models.translator build`): translates the
test split (packages the model never saw), greedy, through the bin-packing batcher on all
cores. Every variant runs at every batcher setting (token budget x streams x padding cap); a setting's time
is the median of ROUNDS interleaved runs on warm sessions (each has translated the longest
batch once, as a server's would have), and each variant is reported at its own best
setting (and FP32 at the same setting as ours). BLEU is sacrebleu's, at the best setting,
with its range over all settings: a model whose output depends on which sentences share its
batch (dynamic activation ranges) shows it there. Then the batcher
against arrival-order batches of ARRIVAL_BATCH at the same precision and setting.
Writes benchmarks/results/translator.json and .md.
"""

import os
import statistics
import time

import numpy as np
import onnx
import sacrebleu

from benchmarks.results import write_results
from benchmarks.rivals import ort_quantize_dynamic, ort_quantize_static
from models.translator.build import calibration_sentences, map_graphs, quantize_translator
from models.translator.corpus import build_corpus, read_split
from models.translator.evaluate import calibration_feeds
from models.translator.translate import Translator, TranslatorFiles, default_folder
from quantize.batcher import StreamPool, pack, padding_fraction
from quantize.recipe import Recipe
from quantize.target import host_isa

ROUNDS = 5
ARRIVAL_BATCH = 32
TOKEN_BUDGETS = (1024, 2048, 4096, 8192, 16384)
PADDING_CAPS = (0.1, 1.0)  # 1.0: budget and batch size only
MAX_BATCH = 256


def main() -> None:
    base = TranslatorFiles.in_folder(default_folder())
    test = read_split(build_corpus(), "test")
    english, references = [p.english for p in test], [[p.german for p in test]]
    feeds = calibration_feeds(base, calibration_sentences())
    variants = {
        "fp32": base,
        "ours": quantize_translator(base, Recipe.transformer(), feeds)[0],
        "ort_dynamic": map_graphs(
            base, ".ort-dynamic", lambda graph, path: ort_quantize_dynamic(onnx.load(path))
        ),
        "ort_static": map_graphs(
            base,
            ".ort-static",
            lambda graph, path: ort_quantize_static(onnx.load(path), feeds[graph]),
        ),
    }
    lengths = Translator(base, threads=1).token_lengths(english)
    streams_options = sorted({1, len(os.sched_getaffinity(0))})
    settings = [
        (budget, streams, cap)
        for budget in TOKEN_BUDGETS
        for streams in streams_options
        for cap in PADDING_CAPS
    ]
    seconds = {(name, s): [] for name in variants for s in settings}
    translations = {}
    for _ in range(ROUNDS):
        for budget, streams, cap in settings:
            batches = pack(lengths, budget, MAX_BATCH, cap)
            for name, files in variants.items():
                elapsed, translations[(name, (budget, streams, cap))] = _timed(
                    english, batches, files, streams
                )
                seconds[(name, (budget, streams, cap))].append(elapsed)
    per_s = {key: len(english) / statistics.median(s) for key, s in seconds.items()}
    best = {name: max(settings, key=lambda s: per_s[(name, s)]) for name in variants}
    bleu_by_setting = {
        key: sacrebleu.corpus_bleu(out, references).score for key, out in translations.items()
    }
    bleu = {name: bleu_by_setting[(name, best[name])] for name in variants}
    output = {name: translations[(name, best[name])] for name in variants}
    identical = {
        name: sum(a == b for a, b in zip(output[name], output["fp32"])) / len(english)
        for name in variants
    }

    budget, streams, cap = best["ours"]
    packed = pack(lengths, budget, MAX_BATCH, cap)
    arrival = [
        list(range(i, min(i + ARRIVAL_BATCH, len(english))))
        for i in range(0, len(english), ARRIVAL_BATCH)
    ]
    batcher = {}
    for name in ("ours", "fp32"):
        times = {"packed": [], "arrival": []}
        for _ in range(ROUNDS):
            times["packed"].append(_timed(english, packed, variants[name], streams)[0])
            times["arrival"].append(_timed(english, arrival, variants[name], streams)[0])
        batcher[name] = statistics.median(times["arrival"]) / statistics.median(times["packed"])

    fp32_best = per_s[("fp32", best["fp32"])]
    data = {
        "fp32_sentences_per_s": fp32_best,
        "int8_sentences_per_s": per_s[("ours", best["ours"])],
        "int8_speedup": per_s[("ours", best["ours"])] / fp32_best,
        "int8_speedup_same_setting": per_s[("ours", best["ours"])] / per_s[("fp32", best["ours"])],
        "bleu_fp32": bleu["fp32"],
        "bleu_int8": bleu["ours"],
        "bleu_drop_relative_pct": 100 * (bleu["fp32"] - bleu["ours"]) / bleu["fp32"],
        "bleu_int8_minus_fp32_95pct_interval": _paired_bootstrap(
            output["ours"], output["fp32"], references[0]
        ),
        "translations_identical_to_fp32": identical,
        "batcher_speedup_vs_arrival_order": batcher["ours"],
        "batcher_speedup_vs_arrival_order_fp32": batcher["fp32"],
        "padding_fraction": padding_fraction(lengths, packed),
        "padding_fraction_arrival_order": padding_fraction(lengths, arrival),
        "best_setting": {
            name: {"token_budget": s[0], "streams": s[1], "max_padding": s[2]}
            for name, s in best.items()
        },
        "sentences_per_s_at_best": {name: per_s[(name, s)] for name, s in best.items()},
        "bleu": bleu,
        "bleu_range_over_settings": {
            name: [
                min(bleu_by_setting[(name, s)] for s in settings),
                max(bleu_by_setting[(name, s)] for s in settings),
            ]
            for name in variants
        },
        "sentences_per_s_by_setting": {
            f"{name} budget={s[0]} streams={s[1]} max_padding={s[2]}": v
            for (name, s), v in per_s.items()
        },
        "test_sentences": len(english),
        "setup": {
            "cores": len(os.sched_getaffinity(0)),
            "threads_per_stream": "cores / streams",
            "arrival_batch": ARRIVAL_BATCH,
            "search": "greedy",
            "rounds": ROUNDS,
            "recipe": Recipe.transformer().to_dict(),
            "calibration": f"{len(feeds['encoder'])} encoder and {len(feeds['decoder'])} decoder-step feeds from dev-split sentences",
        },
        "isa": host_isa(),
    }
    write_results("translator", data, _markdown(data))
    print(_markdown(data))


def _paired_bootstrap(
    hypotheses: list[str], baseline: list[str], references: list[str], samples: int = 300
) -> list[float]:
    """95 % interval of BLEU(hypotheses) - BLEU(baseline) over resampled test sets: how small a
    difference this test set can resolve."""
    rng = np.random.default_rng(0)
    diffs = []
    for _ in range(samples):
        idx = rng.integers(0, len(references), len(references))
        refs = [[references[i] for i in idx]]
        diffs.append(
            sacrebleu.corpus_bleu([hypotheses[i] for i in idx], refs).score
            - sacrebleu.corpus_bleu([baseline[i] for i in idx], refs).score
        )
    return [float(v) for v in np.percentile(diffs, [2.5, 97.5])]


def _timed(
    english: list[str], batches: list[list[int]], files: TranslatorFiles, streams: int
) -> tuple[float, list[str]]:
    """Seconds to translate everything on a pool whose streams have built their sessions and
    translated the longest batch once, and the output."""

    def warm_translator(threads: int) -> Translator:
        translator = Translator(files, threads)
        translator([english[i] for i in batches[0]])
        return translator

    with StreamPool(warm_translator, streams) as pool:
        start = time.perf_counter()
        out = pool.run(english, batches)
        return time.perf_counter() - start, out


def _markdown(d: dict) -> str:
    rows = [
        f"| {name} | {d['sentences_per_s_at_best'][name]:.0f} | {d['sentences_per_s_at_best'][name] / d['fp32_sentences_per_s']:.2f}x | "
        f"{s['token_budget']} x {s['streams']} x {s['max_padding']} | {d['bleu'][name]:.2f} | "
        f"{d['bleu_range_over_settings'][name][0]:.2f}-{d['bleu_range_over_settings'][name][1]:.2f} |"
        for name, s in d["best_setting"].items()
    ]
    isa = d["isa"]
    return "\n".join(
        [
            f"# Translator (test split: {d['test_sentences']} sentences from packages the model never saw; {isa['cpu']}, {isa['int8_gemm_path']})",
            "",
            "| variant | sentences/s (best setting) | vs FP32 best | token budget x streams x padding cap | BLEU | BLEU over all settings |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"INT8 (ours) {d['int8_speedup']:.2f}x FP32 at each one's best setting ({d['int8_speedup_same_setting']:.2f}x at the same setting); "
            f"BLEU {d['bleu_fp32']:.2f} -> {d['bleu_int8']:.2f} ({d['bleu_drop_relative_pct']:+.2f} % relative drop; the test set resolves "
            f"differences outside [{d['bleu_int8_minus_fp32_95pct_interval'][0]:+.2f}, {d['bleu_int8_minus_fp32_95pct_interval'][1]:+.2f}] BLEU); "
            f"{100 * d['translations_identical_to_fp32']['ours']:.1f} % of INT8 translations identical to FP32's.",
            f"Batcher vs arrival-order batches of {d['setup']['arrival_batch']}: {d['batcher_speedup_vs_arrival_order']:.2f}x (INT8), "
            f"{d['batcher_speedup_vs_arrival_order_fp32']:.2f}x (FP32); source padding {100 * d['padding_fraction']:.1f} % vs "
            f"{100 * d['padding_fraction_arrival_order']:.1f} %.",
            "",
        ]
    )


if __name__ == "__main__":
    main()
