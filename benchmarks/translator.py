"""Translator: FP32 vs INT8 (ours, ORT quantize_dynamic, ORT quantize_static), end to end.

`python -m benchmarks.translator` (needs `python -m models.translator build`): translates the
test split (packages the model never saw) with each variant through the bin-packing batcher,
greedy, 2 threads; throughput is the median of ROUNDS interleaved runs; BLEU is sacrebleu's.
Then the batcher against arrival-order batches of BATCH at the same precision. Writes
benchmarks/results/translator.json and .md.
"""

import os
import statistics
import time

import onnx
import sacrebleu

from benchmarks.results import write_results
from benchmarks.rivals import ort_quantize_dynamic, ort_quantize_static
from models.translator.build import calibration_sentences, quantize_translator
from models.translator.corpus import build_corpus, read_split
from models.translator.evaluate import calibration_feeds
from models.translator.translate import Translator, TranslatorFiles, default_folder
from quantize.batcher import BatcherConfig, pack, padding_fraction, run_batches
from quantize.config import QuantConfig
from quantize.modelio import save_model
from quantize.policy import TRANSFORMER_FP32_OPS
from quantize.runtime import cpu_isa

ROUNDS = 3
BATCH = 32  # arrival-order baseline batch size
BATCHER = BatcherConfig(token_budget=2048, max_batch=128, streams=1)


def main() -> None:
    base = TranslatorFiles.in_folder(default_folder())
    test = read_split(build_corpus(), "test")
    english, references = [p.english for p in test], [[p.german for p in test]]
    feeds = calibration_feeds(base, calibration_sentences())
    variants = {
        "fp32": base,
        "ours": quantize_translator(base, QuantConfig.transformer(), feeds)[0],
        "ours_all_ops": quantize_translator(base, QuantConfig(method="entropy"), feeds, suffix=".int8-all")[0],
        "ort_dynamic": _rival(base, "ort-dynamic", lambda m, g: ort_quantize_dynamic(m)),
        "ort_static": _rival(base, "ort-static", lambda m, g: ort_quantize_static(m, feeds[g])),
    }
    lengths = Translator(base, threads=1).token_lengths(english)
    packed = pack(lengths, BATCHER.token_budget, BATCHER.max_batch)
    arrival = [list(range(i, min(i + BATCH, len(english)))) for i in range(0, len(english), BATCH)]
    seconds = {name: [] for name in variants}
    seconds.update({"ours_arrival_order": [], "fp32_arrival_order": []})
    translations = {}
    for _ in range(ROUNDS):
        for name, files in variants.items():
            seconds[name].append(_timed(english, packed, files, translations, name))
        seconds["ours_arrival_order"].append(_timed(english, arrival, variants["ours"], {}, "ours"))
        seconds["fp32_arrival_order"].append(_timed(english, arrival, base, {}, "fp32"))
    per_s = {name: len(english) / statistics.median(s) for name, s in seconds.items()}
    bleu = {name: sacrebleu.corpus_bleu(translations[name], references).score for name in variants}
    data = {
        "fp32_sentences_per_s": per_s["fp32"],
        "int8_sentences_per_s": per_s["ours"],
        "int8_speedup": per_s["ours"] / per_s["fp32"],
        "bleu_fp32": bleu["fp32"],
        "bleu_int8": bleu["ours"],
        "bleu_drop_relative_pct": 100 * (bleu["fp32"] - bleu["ours"]) / bleu["fp32"],
        "batcher_speedup_vs_arrival_order": per_s["ours"] / per_s["ours_arrival_order"],
        "batcher_speedup_vs_arrival_order_fp32": per_s["fp32"] / per_s["fp32_arrival_order"],
        "padding_fraction": padding_fraction(lengths, packed),
        "padding_fraction_arrival_order": padding_fraction(lengths, arrival),
        "sentences_per_s": per_s,
        "bleu": bleu,
        "seconds": seconds,
        "test_sentences": len(english),
        "setup": {"threads": len(os.sched_getaffinity(0)), "streams": BATCHER.streams, "token_budget": BATCHER.token_budget,
                  "arrival_batch": BATCH, "search": "greedy", "rounds": ROUNDS, "policy_fp32_ops": list(TRANSFORMER_FP32_OPS),
                  "calibration": f"entropy, {len(feeds['encoder'])} encoder and {len(feeds['decoder'])} decoder-step feeds from the dev split"},
        "isa": cpu_isa(),
    }
    write_results("translator", data, _markdown(data))
    print(_markdown(data))


def _rival(base: TranslatorFiles, suffix: str, quantize) -> TranslatorFiles:
    files = TranslatorFiles(base.encoder.with_suffix(f".{suffix}.onnx"), base.decoder.with_suffix(f".{suffix}.onnx"), base.tokenizer)
    for graph, source, target in (("encoder", base.encoder, files.encoder), ("decoder", base.decoder, files.decoder)):
        save_model(quantize(onnx.load(source), graph), target)
    return files


def _timed(english: list[str], batches: list[list[int]], files: TranslatorFiles, sink: dict, name: str) -> float:
    translator = Translator(files, threads=BATCHER.cores_per_stream or 0)
    start = time.perf_counter()
    sink[name] = run_batches(english, batches, lambda threads: translator, streams=1)
    return time.perf_counter() - start


def _markdown(d: dict) -> str:
    rows = [f"| {name} | {d['sentences_per_s'][name]:.1f} | {d['sentences_per_s'][name] / d['fp32_sentences_per_s']:.2f}x | {d['bleu'].get(name, float('nan')):.2f} |"
            for name in d["sentences_per_s"]]
    isa = d["isa"]
    return "\n".join([
        f"# Translator (test split, {d['test_sentences']} sentences from unseen packages; {isa['cpu']}, {isa['int8_gemm_path']})",
        "",
        "| variant | sentences/s | vs FP32 | BLEU |",
        "|---|---|---|---|",
        *rows,
        "",
        f"INT8 (ours) {d['int8_speedup']:.2f}x FP32; BLEU {d['bleu_fp32']:.2f} -> {d['bleu_int8']:.2f} "
        f"({d['bleu_drop_relative_pct']:+.2f} % relative drop). Batcher vs arrival-order batches of {d['setup']['arrival_batch']}: "
        f"{d['batcher_speedup_vs_arrival_order']:.2f}x (INT8), {d['batcher_speedup_vs_arrival_order_fp32']:.2f}x (FP32); "
        f"padding {100 * d['padding_fraction']:.1f} % vs {100 * d['padding_fraction_arrival_order']:.1f} %.",
        "",
    ])


if __name__ == "__main__":
    main()
