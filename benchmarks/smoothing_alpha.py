"""`python -m benchmarks.smoothing_alpha`: the transformer preset's SmoothQuant strength against
the weight format, on the zoo's transformers.

SmoothQuant moves a share alpha of each activation outlier into the weights of the GEMMs that
read it (quantize/passes/smooth_activations.py): the activations get easier to quantize and the
weights harder. The preset's alpha was chosen with full 8-bit weights; where U8S8 saturates the
weights are narrower (paired, int7), and the balance may lie elsewhere. For each alpha (no
smoothing, and `auto`, the preset's: with paired or int7 weights it picks by held-out SQNR,
quantize/recipe.py; the other formats take the alpha it picked for the target's first format)
the model is calibrated once (kernel timing off, so that every variant has the same INT8 nodes)
and lowered with each weight format this CPU runs exactly; for each: output SQNR on the held-out
samples, the zoo's task fidelity, and speed against the cleaned FP32 graph, all timed in one
run. Writes benchmarks/results/smoothing_alpha_TARGET.{json,md}.
"""

from dataclasses import replace
from functools import partial

from benchmarks.results import for_this_cpu, sized, write_results
from benchmarks.weight_formats import formats
from benchmarks.zoo.run import FULL, REDUCED, all_models, calibrated, untimed_recipe
from quantize.bench import compare
from quantize.frontend import load_model
from quantize.pipeline import with_weights
from quantize.recipe import SmoothQuant
from quantize.runtime import session

TITLE = "# SmoothQuant strength (alpha) against the weight format, transformer preset"
ALPHAS = (None, 0.5, 0.6, 0.7, 0.8, 0.9, "auto")  # None: no smoothing


def transformer_models() -> list:
    """The zoo's transformers (`ZooModel.transformer`), one MiniLM export: the two exporters
    write the same graph."""
    return [m for m in all_models() if m.transformer and "dynamo" not in m.exporter]


def run_model(model, calibration: int, evaluation: int, seconds: float) -> dict:
    recipe = untimed_recipe(load_model(model.build()))
    variants = {}
    for alpha in ALPHAS:
        first = calibrated(
            model, replace(recipe, smoothing=alpha and SmoothQuant(alpha)), calibration
        )
        for weights in formats(first.recipe.target):
            variants[(alpha, weights)] = (
                first if weights == first.recipe.weights else with_weights(first, weights)
            )
    feeds = model.evaluation(evaluation)
    runners = {"fp32": session(first.fp32_model)}
    runners.update({key: session(r.model) for key, r in variants.items()})
    outputs = {key: [r.run(None, feed) for feed in feeds] for key, r in runners.items()}
    speed = {}
    if seconds:
        calls = {key: partial(r.run, None, feeds[0]) for key, r in runners.items()}
        speed = compare(calls, len(next(iter(feeds[0].values()))), min_seconds=seconds)
    return {
        "name": model.name,
        "target": first.recipe.target,
        "fidelity_target": model.fidelity_target,
        "variants": [
            {
                "alpha": alpha,
                "alpha_taken": r.recipe.smoothing and r.recipe.smoothing.alpha,
                "weights": weights,
                "output_sqnr_db": min(r.output_sqnr_db.values()),
                "fidelity": model.fidelity(feeds, outputs["fp32"], outputs[(alpha, weights)]),
                "over_fp32_cleaned": speed[(alpha, weights)]["throughput"]
                / speed["fp32"]["throughput"]
                if speed
                else None,
            }
            for (alpha, weights), r in variants.items()
        ],
    }


def _alpha(variant: dict) -> str:
    if variant["alpha"] == "auto":
        return f"auto: {variant['alpha_taken']:g}"
    return "none" if variant["alpha"] is None else f"{variant['alpha']:g}"


def _table(records: list[dict]) -> str:
    rows = []
    for r in records:
        for v in r["variants"]:
            f, speed = v["fidelity"], v["over_fp32_cleaned"]
            worst = f" (worst {f['worst']:.4f})" if "worst" in f else ""
            rows.append(
                f"| {r['name']} | {_alpha(v)} | {v['weights']} "
                f"| {v['output_sqnr_db']:.1f} | {f['value']:.4f}{worst} "
                f"{'meets' if f['meets'] else 'misses'} | {r['fidelity_target']} "
                f"| {'-' if speed is None else f'{speed:.2f}x'} |"
            )
    return "\n".join(
        [
            "| model | alpha | weights | output SQNR (dB) | fidelity | target | x FP32 cleaned |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


def main() -> None:
    sizes = sized(FULL, REDUCED)
    records = [
        run_model(m, sizes["calibration"], sizes["evaluation"], sizes["seconds"])
        for m in transformer_models()
    ]
    markdown = f"{TITLE}\n\n{_table(records)}"
    write_results(for_this_cpu("smoothing_alpha"), {"models": records}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
