"""`python -m benchmarks.div_to_mul`: what DivToMulPass buys, on the zoo models with a Div by a
constant in INT8 (hard-swish's / 6 in the PP-OCR models), in one run on this CPU.

One calibration per model (its auto preset, kernel timing off so that both forms have the same
INT8 nodes), lowered as quantize lowers it (each Div a QLinearMul by 1/c) and again with those
Divs in FP32, which is what ONNX Runtime ran before the pass: a float Div between a
DequantizeLinear and a QuantizeLinear. Speed against the cleaned FP32 graph at the zoo's served
batch, and output SQNR on held-out samples. Writes benchmarks/results/div_to_mul_TARGET.{json,md}.
"""

from functools import partial

from benchmarks.results import for_this_cpu, shape_text, sized, write_results
from benchmarks.zoo.run import FULL, REDUCED, all_models, calibrated, untimed_recipe
from quantize.bench import compare
from quantize.frontend import load_model
from quantize.passes import cleanup
from quantize.pipeline import keep_fp32
from quantize.policy import select_nodes
from quantize.runtime import session

TITLE = "# A Div by a constant: QLinearMul by 1/c (DivToMulPass) against a float Div between Q/DQ"


def run_model(model, calibration: int, evaluation: int, seconds: float) -> dict | None:
    fp32 = load_model(model.build())
    recipe = untimed_recipe(fp32)
    graph = cleanup(fp32.clone())
    taken = select_nodes(graph, recipe.overrides.fp32, recipe.activation_matmuls).int8
    if not any(n.op_type == "Div" and n.name in taken for n in graph.graph):
        return None  # before calibrating: the recipe keeps every Div FP32
    as_mul = calibrated(model, recipe, calibration)
    divs = [d.name for d in as_mul.decisions if d.op_type == "Div" and d.precision == "int8"]
    if not divs:
        return None  # the pipeline kept them FP32 (the transformer recipe's Divs outside Convs)
    as_div = keep_fp32(as_mul, dict.fromkeys(divs, "a float Div, as before DivToMulPass"))
    forms = {"fp32": as_mul.fp32_model, "mul": as_mul.model, "div": as_div.model}
    feeds = model.evaluation(evaluation)[0]
    runners = {name: session(m) for name, m in forms.items()}
    calls = {name: partial(r.run, None, feeds) for name, r in runners.items()}
    speed = compare(calls, len(next(iter(feeds.values()))), min_seconds=seconds)
    return {
        "name": model.name,
        "divs": len(divs),
        "bench_shape": {k: list(v.shape) for k, v in feeds.items()},
        **{
            form: {
                "output_sqnr_db": min(result.output_sqnr_db.values()),
                "over_fp32_cleaned": speed[form]["throughput"] / speed["fp32"]["throughput"],
                "boundaries": result.kernels["boundary"].get("QuantizeLinear", 0),
            }
            for form, result in (("mul", as_mul), ("div", as_div))
        },
    }


def _table(records: list[dict]) -> str:
    rows = [
        f"| {r['name']} | {r['divs']} | {shape_text(r['bench_shape'])} "
        f"| {r['div']['over_fp32_cleaned']:.2f}x ({r['div']['boundaries']}, {r['div']['output_sqnr_db']:.1f} dB) "
        f"| {r['mul']['over_fp32_cleaned']:.2f}x ({r['mul']['boundaries']}, {r['mul']['output_sqnr_db']:.1f} dB) "
        f"| {r['mul']['over_fp32_cleaned'] / r['div']['over_fp32_cleaned']:.2f}x |"
        for r in records
    ]
    return "\n".join(
        [
            "| model | Divs by a constant | served shape | float Div: x FP32 cleaned (QuantizeLinears "
            "left, output SQNR) | QLinearMul by 1/c: the same | Mul over Div |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )


def main() -> None:
    sizes = sized(FULL, REDUCED)
    found = (
        run_model(m, sizes["calibration"], sizes["evaluation"], sizes["seconds"])
        for m in all_models()
    )
    records = [r for r in found if r is not None]
    markdown = f"{TITLE}\n\n{_table(records)}"
    write_results(for_this_cpu("div_to_mul"), {"models": records}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
