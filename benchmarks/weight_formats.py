"""`python -m benchmarks.weight_formats`: the zoo's models with each weight format on this CPU.

One calibration per model (its auto preset, this CPU's target, kernel timing off so that every
format has the same INT8 nodes), lowered with each weight format this CPU runs exactly: paired,
int7 and uint8 where U8S8 saturates (avx2), and int8 too elsewhere. For each: output SQNR on the
held-out samples, the zoo's task fidelity, and speed against the cleaned FP32 graph, all timed
in one run. Every format is exact on the CPU it is run on, so its fidelity is the same on an
avx2 CPU: on a VNNI one this measures what the avx2 formats cost against int8. This is the
evidence behind the weight choice (quantize/weight_choice.py): writes
benchmarks/results/weight_formats_TARGET.{json,md}.
"""

from functools import partial

from benchmarks.results import for_this_cpu, sized, write_results
from benchmarks.zoo.run import FULL, REDUCED, all_models, calibrated, untimed_recipe
from benchmarks.zoo.zoo_model import ZooModel
from quantize.bench import compare
from quantize.frontend import load_model
from quantize.pipeline import with_weights
from quantize.runtime import session
from quantize.target import WEIGHT_FORMATS, saturated_by

TITLE = (
    "# Weight formats on this CPU: paired and int7 (U8S8) against uint8 (U8U8) and, where exact, "
    "int8"
)


def formats(target: str) -> list[str]:
    return [name for name in WEIGHT_FORMATS if not saturated_by(name, target)]


def run_model(model, calibration: int, evaluation: int, seconds: float) -> dict:
    first = calibrated(model, untimed_recipe(load_model(model.build())), calibration)
    results = {
        name: first if name == first.recipe.weights else with_weights(first, name)
        for name in formats(first.recipe.target)
    }
    feeds = model.evaluation(evaluation)
    runners = {"fp32": session(first.fp32_model)}
    runners.update({name: session(r.model) for name, r in results.items()})
    outputs = {name: [r.run(None, feed) for feed in feeds] for name, r in runners.items()}
    record = {
        "name": model.name,
        "target": first.recipe.target,
        "fidelity_target": model.fidelity_target,
        "int8_nodes": sum(d.precision == "int8" for d in first.decisions),
        "formats": {
            name: {
                "output_sqnr_db": min(r.output_sqnr_db.values()),
                "fidelity": model.fidelity(feeds, outputs["fp32"], outputs[name]),
            }
            for name, r in results.items()
        },
    }
    if seconds:
        batch = len(next(iter(feeds[0].values())))
        calls = {name: partial(r.run, None, feeds[0]) for name, r in runners.items()}
        speed = compare(calls, batch, min_seconds=seconds)
        for name in results:
            record["formats"][name]["over_fp32_cleaned"] = (
                speed[name]["throughput"] / speed["fp32"]["throughput"]
            )
    return record


def _table(records: list[dict]) -> str:
    rows = []
    for r in records:
        for name, f in r["formats"].items():
            fidelity = f["fidelity"]
            speed = f.get("over_fp32_cleaned")
            rows.append(
                f"| {r['name']} | {name} | {f['output_sqnr_db']:.1f} "
                f"| {fidelity['value']:.4f} {'meets' if fidelity['meets'] else 'misses'} "
                f"| {r['fidelity_target']} | {'-' if speed is None else f'{speed:.2f}x'} |"
            )
    return "\n".join(
        [
            "| model | weights | output SQNR (dB) | fidelity | target | x FP32 cleaned |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )


SAME_WEIGHTS_AS_ANOTHER = "all-MiniLM-L6-v2 (dynamo)"  # the TorchScript export's weights


def measured_models() -> list[ZooModel]:
    return [m for m in all_models() if m.name != SAME_WEIGHTS_AS_ANOTHER]


def main() -> None:
    sizes = sized(FULL, REDUCED)
    records = [
        run_model(m, sizes["calibration"], sizes["evaluation"], sizes["seconds"])
        for m in measured_models()
    ]
    markdown = f"{TITLE}\n\n{_table(records)}"
    write_results(for_this_cpu("weight_formats"), {"models": records}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
