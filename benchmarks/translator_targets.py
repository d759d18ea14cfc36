"""`python -m benchmarks.translator_targets [--sentences N]`: the translator's BLEU on an AVX2 CPU,
with INT8 made for each target, against the FP32 graph INT8 starts from.

The INT8 models run on an emulated CPU (../shared/tools/as-cpu avx2, qemu: MLAS takes its AVX2
kernels, whose u8s8 products saturate in int16, whatever the host), so this runs on any machine;
accuracy only, emulated speed means nothing. The FP32 baseline runs natively: it has no integer
kernel to saturate, and qemu emulates float vector instructions in software, so the FP32 model
emulated would take hours over the test split. Rows: FP32 after quantize's clean-up (the
baseline); INT8 made for avx2 (paired weights: what `--target auto` makes on an AVX2 machine,
and int7 weights, within +-64, beside it); INT8 made for vnni/amx (full-range weights) as
quantize's runtime runs it there (ORT's exact U8U8 kernels, with a warning), and with ORT's
default kernels (what a quantizer unaware of the target meets). Greedy, the test split
(packages the model never saw), bin-packed batches of 4096 tokens. Needs
`python -m models.translator build`. Writes benchmarks/results/translator_targets.{json,md}.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import sacrebleu

from benchmarks.results import sized, write_results
from benchmarks.targets import AS_CPU
from models.translator.build import calibration_sentences, map_graphs, quantize_translator
from models.translator.corpus import build_corpus, read_split
from models.translator.evaluate import calibration_feeds
from models.translator.translate import TranslatorFiles, default_folder
from quantize.pipeline import cleaned_fp32
from quantize.recipe import Recipe

LABELS = {
    "fp32_clean": "FP32 after clean-up (baseline)",
    "avx2": "INT8 for avx2 (paired weights, the default)",
    "avx2_int7": "INT8 for avx2, int7 weights (+-64)",
    "vnni_exact": "INT8 for vnni/amx, quantize's runtime (exact U8U8 kernels)",
    "vnni_default": "INT8 for vnni/amx, ORT default kernels (saturating)",
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.translator_targets")
    parser.add_argument(
        "--sentences", type=int, default=sized(None, 32), help="the first N test sentences"
    )
    args = parser.parse_args()
    base = TranslatorFiles.in_folder(default_folder())
    test = read_split(build_corpus(), "test")[: args.sentences]
    english, references = [p.english for p in test], [[p.german for p in test]]
    feeds = calibration_feeds(base, calibration_sentences())
    clean = map_graphs(base, ".clean", lambda graph, path: cleaned_fp32(path))
    recipes = {
        "avx2": Recipe.transformer(target="avx2"),
        "avx2_int7": Recipe.transformer(target="avx2", weights="int7"),
        "vnni": Recipe.transformer(target="vnni"),
    }
    made_for = {
        name: quantize_translator(base, recipe, feeds, suffix=f".int8-{name}")[0]
        for name, recipe in recipes.items()
    }
    native = _translations({"fp32_clean": (clean, None)}, base.tokenizer, english, emulate=False)
    int8 = {
        "avx2": (made_for["avx2"], None),
        "avx2_int7": (made_for["avx2_int7"], None),
        "vnni_exact": (made_for["vnni"], None),
        "vnni_default": (made_for["vnni"], False),
    }
    emulated = _translations(int8, base.tokenizer, english, emulate=True)
    output = native["translations"] | emulated["translations"]
    bleu = {
        name: sacrebleu.corpus_bleu(german, references).score for name, german in output.items()
    }
    result = {
        "isa_emulated": emulated["isa"],
        "isa_native": native["isa"],
        "test_sentences": len(english),
        "rows": {
            name: {
                "label": LABELS[name],
                "bleu": bleu[name],
                "bleu_drop_relative": 1 - bleu[name] / bleu["fp32_clean"],
                "identical_to_fp32": sum(a == b for a, b in zip(output[name], output["fp32_clean"]))
                / len(english),
            }
            for name in output
        },
    }
    markdown = _markdown(result)
    path = write_results("translator_targets", result, markdown)
    print(markdown)
    print(f"wrote {path}")


def _translations(models: dict, tokenizer: Path, english: list[str], emulate: bool) -> dict:
    """Every model's translations, under qemu's AVX2-only CPU if `emulate`, else on this one
    (benchmarks/translator_targets_child.py)."""
    if emulate and not AS_CPU.exists():
        raise SystemExit(f"translator_targets: {AS_CPU} is missing (the AVX2 emulator)")
    spec = {
        "tokenizer": str(tokenizer),
        "sentences": english,
        "models": {
            name: {"encoder": str(f.encoder), "decoder": str(f.decoder), "exact_kernels": exact}
            for name, (f, exact) in models.items()
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        run = subprocess.run(  # its progress and errors go to our stderr
            ([str(AS_CPU), "avx2"] if emulate else [])
            + [sys.executable, "-m", "benchmarks.translator_targets_child"]
            + [str(Path(tmp) / "spec.json")],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[1],
        )
    if run.returncode != 0:
        where = "emulated" if emulate else "native"
        raise SystemExit(f"translator_targets: the {where} run failed (exit {run.returncode})")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _markdown(result: dict) -> str:
    isa, native = result["isa_emulated"], result["isa_native"]
    lines = [
        f"# Translator BLEU per INT8 target, on an emulated AVX2 CPU ({isa['int8_gemm_path']})",
        "",
        f"{result['test_sentences']} test sentences, greedy. Accuracy only. INT8 models run "
        f"under emulation; the FP32 baseline natively ({native['cpu']}), as qemu "
        "computes float vectors in software.",
        "",
        "| model | BLEU | drop vs baseline (relative) | identical to FP32 |",
        "|---|---|---|---|",
    ]
    for row in result["rows"].values():
        lines.append(
            f"| {row['label']} | {row['bleu']:.2f} | {100 * row['bleu_drop_relative']:.2f} % "
            f"| {100 * row['identical_to_fp32']:.1f} % |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
