"""Translator: FP32 (as exported, and after quantize's clean-up: the baseline) vs INT8 (ours,
ORT quantize_dynamic, ORT quantize_static), end to end, and CTranslate2 (float32 and int8) on
the same trained weights; and OpenVINO running the cleaned FP32 graphs, NNCF's INT8 of them
and ours.

`python -m benchmarks.translator` (needs `python -m models.translator build`): translates the
test split (packages the model never saw), greedy, through the bin-packing batcher on all
cores. CTranslate2 batches by itself (`max_batch_size` source tokens, `batch_type="tokens"`,
`inter_threads` workers), at every token budget x worker count. Every ONNX variant runs at every batcher setting (token budget x streams x padding cap); a setting's time
is the median of ROUNDS interleaved runs on warm sessions (each has translated the longest
batch once, as a server's would have), and each variant is reported at its own best
setting (and FP32 at the same setting as ours). BLEU is sacrebleu's, at the best setting,
with its range over all settings: a model whose output depends on which sentences share its
batch (dynamic activation ranges) shows it there. Then the batcher
against arrival-order batches of ARRIVAL_BATCH at the same precision and setting.
Writes benchmarks/results/translator_TARGET.json and .md (TARGET: this CPU's INT8 path).
"""

import os
import statistics
import time

import numpy as np
import onnx
import sacrebleu

from benchmarks.ct2_translator import CT2Translator, convert
from benchmarks.results import for_this_cpu, sized, write_results
from benchmarks.rivals import nncf_int8, ort_quantize_dynamic, ort_quantize_static
from models.progress import ProgressLine
from models.translator.build import calibration_sentences, map_graphs, quantize_translator
from models.translator.corpus import build_corpus, read_split
from models.translator.evaluate import calibration_feeds
from models.translator.network import SMALL
from models.translator.train import build_model
from models.translator.translate import Translator, TranslatorFiles, default_folder
from quantize.batcher import StreamPool, pack, padding_fraction
from quantize.pipeline import cleaned_fp32
from quantize.recipe import Recipe
from quantize.target import host_isa

ROUNDS = sized(5, 1)
ARRIVAL_BATCH = 32
TOKEN_BUDGETS = sized((1024, 2048, 4096, 8192, 16384), (2048,))
PADDING_CAPS = (0.1, 1.0)  # 1.0: budget and batch size only
MAX_BATCH = 256
CT2_COMPUTE_TYPES = {"ctranslate2_fp32": "float32", "ctranslate2_int8": "int8"}
RUNTIME = dict.fromkeys(("openvino_fp32", "nncf_openvino", "ours_openvino"), "openvino")  # else ORT


def main() -> None:
    base = TranslatorFiles.in_folder(default_folder())
    test = read_split(build_corpus(), "test")[: sized(None, 64)]
    english, references = [p.english for p in test], [[p.german for p in test]]
    feeds = calibration_feeds(base, calibration_sentences())
    variants = {
        "fp32": base,
        "fp32_clean": map_graphs(base, ".clean", lambda graph, path: cleaned_fp32(path)),
        "ours": quantize_translator(base, Recipe.transformer(), feeds)[0],
        "ort_dynamic": map_graphs(
            base, ".ort-dynamic", lambda graph, path: ort_quantize_dynamic(onnx.load(path))
        ),
        "ort_static": map_graphs(
            base,
            ".ort-static",
            lambda graph, path: ort_quantize_static(
                onnx.load(path), feeds[graph], transformer=True
            ),
        ),
    }
    variants |= {
        "openvino_fp32": variants["fp32_clean"],
        "nncf_openvino": _nncf(variants["fp32_clean"], feeds),
        "ours_openvino": variants["ours"],
    }
    ct2_folder = convert(
        build_model(SMALL, default_folder() / "translator.weights.h5"),
        base.tokenizer,
        default_folder() / "ctranslate2",
    )
    lengths = Translator(base, threads=1).token_lengths(english)
    cores = len(os.sched_getaffinity(0))
    streams_options = sorted({1, cores})
    settings = [
        (budget, streams, cap)
        for budget in TOKEN_BUDGETS
        for streams in streams_options
        for cap in PADDING_CAPS
    ]
    ct2_settings = [
        (budget, workers, None) for budget in TOKEN_BUDGETS for workers in streams_options
    ]
    ct2 = {
        (name, workers): _warm(
            CT2Translator(ct2_folder, base.tokenizer, kind, cores // workers, workers), english
        )
        for name, kind in CT2_COMPUTE_TYPES.items()
        for workers in streams_options
    }
    settings_of = dict.fromkeys(variants, settings) | dict.fromkeys(CT2_COMPUTE_TYPES, ct2_settings)
    seconds = {(name, s): [] for name, options in settings_of.items() for s in options}
    progress = ProgressLine(ROUNDS * len(seconds), unit="run", task="timing")
    translations = {}
    for _ in range(ROUNDS):
        for budget, streams, cap in settings:
            batches = pack(lengths, budget, MAX_BATCH, cap)
            for name, files in variants.items():
                elapsed, translations[(name, (budget, streams, cap))] = _timed(
                    english, batches, files, streams, RUNTIME.get(name, "onnxruntime")
                )
                seconds[(name, (budget, streams, cap))].append(elapsed)
                progress.update(sum(map(len, seconds.values())))
        for budget, workers, _ in ct2_settings:
            for name in CT2_COMPUTE_TYPES:
                start = time.perf_counter()
                translations[(name, (budget, workers, None))] = ct2[(name, workers)](
                    english, budget
                )
                seconds[(name, (budget, workers, None))].append(time.perf_counter() - start)
                progress.update(sum(map(len, seconds.values())))
    per_s = {key: len(english) / statistics.median(s) for key, s in seconds.items()}
    best = {
        name: max(options, key=lambda s: per_s[(name, s)]) for name, options in settings_of.items()
    }
    bleu_by_setting = {
        key: sacrebleu.corpus_bleu(out, references).score for key, out in translations.items()
    }
    bleu = {name: bleu_by_setting[(name, best[name])] for name in settings_of}
    output = {name: translations[(name, best[name])] for name in settings_of}
    identical = {
        name: sum(a == b for a, b in zip(output[name], output["fp32"])) / len(english)
        for name in settings_of
    }

    budget, streams, cap = best["ours"]
    packed = pack(lengths, budget, MAX_BATCH, cap)
    arrival = [
        list(range(i, min(i + ARRIVAL_BATCH, len(english))))
        for i in range(0, len(english), ARRIVAL_BATCH)
    ]
    batcher = {}
    for name in ("ours", "fp32_clean"):
        times = {"packed": [], "arrival": []}
        for _ in range(ROUNDS):
            times["packed"].append(_timed(english, packed, variants[name], streams)[0])
            times["arrival"].append(_timed(english, arrival, variants[name], streams)[0])
        batcher[name] = statistics.median(times["arrival"]) / statistics.median(times["packed"])

    at_best = {name: per_s[(name, s)] for name, s in best.items()}
    data = {
        "fp32_sentences_per_s": at_best["fp32"],
        "fp32_clean_sentences_per_s": at_best["fp32_clean"],
        "int8_sentences_per_s": at_best["ours"],
        "baseline": "fp32_clean",
        "int8_speedup": at_best["ours"] / at_best["fp32_clean"],
        "int8_speedup_vs_exported": at_best["ours"] / at_best["fp32"],
        "int8_speedup_same_setting": at_best["ours"] / per_s[("fp32_clean", best["ours"])],
        "int8_over_ctranslate2_int8": at_best["ours"] / at_best["ctranslate2_int8"],
        "bleu_fp32": bleu["fp32"],
        "bleu_int8": bleu["ours"],
        "bleu_drop_relative_pct": 100 * (bleu["fp32"] - bleu["ours"]) / bleu["fp32"],
        "bleu_int8_minus_fp32_95pct_interval": _paired_bootstrap(
            output["ours"], output["fp32"], references[0]
        ),
        "translations_identical_to_fp32": identical,
        "batcher_speedup_vs_arrival_order": batcher["ours"],
        "batcher_speedup_vs_arrival_order_fp32": batcher["fp32_clean"],
        "padding_fraction": padding_fraction(lengths, packed),
        "padding_fraction_arrival_order": padding_fraction(lengths, arrival),
        "best_setting": {
            name: {"token_budget": s[0], "streams": s[1], "max_padding": s[2]}
            for name, s in best.items()
        },
        "sentences_per_s_at_best": at_best,
        "bleu": bleu,
        "bleu_range_over_settings": {
            name: [
                min(bleu_by_setting[(name, s)] for s in options),
                max(bleu_by_setting[(name, s)] for s in options),
            ]
            for name, options in settings_of.items()
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
            "ctranslate2": "converted from the same Keras weights (benchmarks/ct2_translator.py); int8 = "
            'compute_type="int8"; its own batching: max_batch_size tokens, workers = inter_threads, '
            "intra_threads = cores / workers; max_decoding_length = the model's max_len - 1",
            "openvino": "CPU plugin through the same batcher (quantize.runtime.OpenVINOSession: f32 "
            "where not INT8, LATENCY hint, threads = cores / streams, dynamic shapes); NNCF: "
            "nncf.quantize of the cleaned graphs with its defaults and model_type=TRANSFORMER, on "
            "the calibration feeds ours takes",
        },
        "isa": host_isa(),
    }
    write_results(for_this_cpu("translator"), data, _markdown(data))
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


def _warm(translator: CT2Translator, english: list[str]) -> CT2Translator:
    """Has translated the longest sentences once, as a server's would have."""
    translator(sorted(english, key=len)[-32:])
    return translator


def _nncf(clean: TranslatorFiles, feeds: dict[str, list[dict]]) -> TranslatorFiles:
    """NNCF INT8 of the cleaned graphs (its TRANSFORMER type, on our calibration feeds): OpenVINO
    models, in memory."""
    return TranslatorFiles(
        *(nncf_int8(getattr(clean, g), feeds[g], transformer=True) for g in ("encoder", "decoder")),
        clean.tokenizer,
    )


def _timed(
    english: list[str],
    batches: list[list[int]],
    files: TranslatorFiles,
    streams: int,
    runtime: str = "onnxruntime",
) -> tuple[float, list[str]]:
    """Seconds to translate everything on a pool whose streams have built their sessions and
    translated the longest batch once, and the output."""

    def warm_translator(threads: int) -> Translator:
        translator = Translator(files, threads, runtime=runtime)
        translator([english[i] for i in batches[0]])
        return translator

    with StreamPool(warm_translator, streams) as pool:
        start = time.perf_counter()
        out = pool.run(english, batches)
        return time.perf_counter() - start, out


def _markdown(d: dict) -> str:
    speed, clean = d["sentences_per_s_at_best"], d["fp32_clean_sentences_per_s"]

    def setting(s: dict) -> str:
        padding = "CTranslate2's own" if s["max_padding"] is None else s["max_padding"]
        return f"{s['token_budget']} x {s['streams']} x {padding}"

    rows = [
        f"| {name} | {speed[name]:.0f} | {speed[name] / clean:.2f}x | {speed[name] / d['fp32_sentences_per_s']:.2f}x | "
        f"{setting(s)} | {d['bleu'][name]:.2f} | "
        f"{d['bleu_range_over_settings'][name][0]:.2f}-{d['bleu_range_over_settings'][name][1]:.2f} | "
        f"{100 * d['translations_identical_to_fp32'][name]:.1f} % |"
        for name, s in d["best_setting"].items()
    ]
    isa = d["isa"]
    return "\n".join(
        [
            f"# Translator (test split: {d['test_sentences']} sentences from packages the model never saw; {isa['cpu']}, {isa['int8_gemm_path']})",
            "",
            "| variant | sentences/s (best setting) | x FP32 after clean-up | x FP32 as exported | token budget x streams x padding cap | BLEU | BLEU over all settings | identical to FP32 |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"INT8 (ours) {d['int8_speedup']:.2f}x the cleaned FP32 graph at each one's best setting ({d['int8_speedup_same_setting']:.2f}x at the same setting, "
            f"{d['int8_speedup_vs_exported']:.2f}x FP32 as exported) and {d['int8_over_ctranslate2_int8']:.2f}x CTranslate2 int8; "
            f"BLEU {d['bleu_fp32']:.2f} -> {d['bleu_int8']:.2f} ({d['bleu_drop_relative_pct']:+.2f} % relative drop; the test set resolves "
            f"differences outside [{d['bleu_int8_minus_fp32_95pct_interval'][0]:+.2f}, {d['bleu_int8_minus_fp32_95pct_interval'][1]:+.2f}] BLEU).",
            f"Batcher vs arrival-order batches of {d['setup']['arrival_batch']}: {d['batcher_speedup_vs_arrival_order']:.2f}x (INT8), "
            f"{d['batcher_speedup_vs_arrival_order_fp32']:.2f}x (FP32 after clean-up); source padding {100 * d['padding_fraction']:.1f} % vs "
            f"{100 * d['padding_fraction_arrival_order']:.1f} %.",
            "",
        ]
    )


if __name__ == "__main__":
    main()
