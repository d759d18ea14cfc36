"""The validation report: what INT8 lost and gained, as a dict, a JSON file and one HTML page.

`summarize` needs only the quantization result; `evaluate` adds a task metric (top-1, BLEU,
physics) through an evaluator from `quantize.evaluators`, and throughput FP32 vs INT8. An
evaluator with a `sections(fp32_model, int8_model)` method adds its own sections (title, data
for the JSON, html for the page), e.g. the calorimeter GAN's physics plots.
"""

import functools
import html
import importlib.util
import json
from collections import defaultdict
from pathlib import Path

from onnxio import write_text
from quantize import bench
from quantize.pipeline import WIN_MARGIN, QuantizeResult
from quantize.policy import ON_AMX_TILES
from quantize.runtime import error_line
from quantize.target import host_isa, host_target
from quantize.validate import LAYER_FLOOR_DB, OUTPUT_FLOOR_DB


def summarize(result: QuantizeResult) -> dict:
    by_type: dict[str, dict[str, int]] = defaultdict(lambda: {"int8": 0, "fp32": 0})
    for d in result.decisions:
        by_type[d.op_type][d.precision] += 1
    return {
        "recipe": result.recipe.to_dict(),
        "options": vars(result.options),
        "calibration": {
            "samples": result.calibration_samples,
            "seconds": round(result.calibration_seconds, 2),
        },
        "size_bytes": {"fp32": result.fp32_model.ByteSize(), "int8": result.model.ByteSize()},
        "coverage": {
            "by_op_type": dict(sorted(by_type.items())),
            "fp32_nodes": [vars(d) for d in result.decisions if d.precision == "fp32"],
            "ort_kernels": result.kernels,
        },
        "kernel_timing": _kernel_timing(result),
        "speed_check": result.speed_check,
        "bias_correction": result.bias_correction,
        "smoothing": result.smoothing,
        "group_cost": result.group_cost,
        "weights": {
            "format": result.recipe.weights,
            "choice": result.weight_choice,
            "amx_tile_convs": amx_tile_convs(result),
        },
        "fidelity": fidelity(result.output_sqnr_db, result.layer_sqnr_db),
        "output_sqnr_db": result.output_sqnr_db,
        "sqnr_samples": result.sqnr_samples,
        "layer_sqnr_db": result.layer_sqnr_db,
    }


def amx_tile_convs(result: QuantizeResult) -> int:
    """How many of `result`'s Convs run on AMX tiles (stored for ONNX Runtime's GEMM path)."""
    return sum(d.reason == ON_AMX_TILES for d in result.decisions)


def weights_text(weights: dict) -> str:
    """The summary's weight format, why it was chosen if it was, and how many Convs run on AMX
    tiles if any."""
    tiles = weights["amx_tile_convs"]
    return (
        weights["format"]
        + (f": {weights['choice']}" if weights["choice"] else "")
        + (f"; {tiles} Convs on AMX tiles (stored for ONNX Runtime's GEMM path)" if tiles else "")
    )


def fidelity(output_sqnr_db: dict[str, float], layer_sqnr_db: dict[str, float]) -> dict:
    """ "ok", or "low" with the worst layers and what to try: low fidelity is never silent."""
    worst_output = min(output_sqnr_db.values(), default=float("inf"))
    worst_layers = dict(sorted(layer_sqnr_db.items(), key=lambda kv: kv[1])[:3])
    low = worst_output < OUTPUT_FLOOR_DB or any(db < LAYER_FLOOR_DB for db in worst_layers.values())
    verdict = {
        "verdict": "low" if low else "ok",
        "output_sqnr_db_min": worst_output,
        "worst_layers_db": worst_layers,
    }
    if low:
        verdict["advice"] = (
            f"output SQNR {worst_output:.1f} dB (floor {OUTPUT_FLOOR_DB} dB), worst layers "
            + ", ".join(f"{name} {db:.1f} dB" for name, db in worst_layers.items())
            + ": keep the ops around them FP32 (--exclude NAME), bound the loss (--max-drop X: the output cosine to FP32, or --evaluate's metric), "
            "or try another --method"
        )
    return verdict


def _kernel_timing(result: QuantizeResult) -> str:
    recipe = result.recipe
    if not recipe.kernel_timing:
        return "off: every chosen node is INT8"
    if recipe.target != host_target():
        return f"not measured: the target {recipe.target} is not this CPU's ({host_target()})"
    if recipe.runtime != "onnxruntime":
        return (
            f"not measured: it times ONNX Runtime's kernels, and the model is for {recipe.runtime}"
        )
    measured = (
        f"measured on this CPU ({recipe.target}): nodes whose INT8 kernel is slower stay FP32"
    )
    return f"{measured}; {result.timing_check}" if result.timing_check else measured


def evaluate(summary: dict, result: QuantizeResult, evaluator=None, seconds: float = 3.0) -> dict:
    """The summary plus throughput FP32 vs INT8 on a held-out batch at the served batch size and,
    if given, the task metric. A model made for ONNX Runtime is timed in OpenVINO too, where it
    is installed (`openvino`)."""
    report = dict(summary, isa=host_isa())
    speed, report["openvino"] = _throughput(result, seconds)
    report["throughput"] = dict(
        speed, speedup=speed["int8"]["throughput"] / speed["fp32"]["throughput"]
    )
    if evaluator is not None:
        before, after = evaluator.evaluate(result.fp32_model), evaluator.evaluate(result.model)
        drop = before - after if evaluator.higher_is_better else after - before
        report["metric"] = {
            "evaluator": evaluator.name,
            "name": evaluator.metric,
            "fp32": before,
            "int8": after,
            "drop": drop,
        }
        if hasattr(evaluator, "sections"):
            report["sections"] = evaluator.sections(result.fp32_model, result.model)
    return report


def _throughput(result: QuantizeResult, seconds: float) -> tuple[dict, dict | None]:
    """FP32 and INT8 timed in the recipe's runtime and, for ONNX Runtime's model, the same INT8
    model in OpenVINO, interleaved with them: what OpenVINO would make of it (`openvino`)."""
    models = {"fp32": result.fp32_model, "int8": result.model}
    timed = functools.partial(
        bench.compare_sessions, feeds=result.served_feeds, threads=result.options.threads
    )
    if result.recipe.runtime != "onnxruntime":
        return timed(models, min_seconds=seconds, runtime=result.recipe.runtime), None
    if importlib.util.find_spec("openvino") is None:
        why = "it is not installed (pip install openvino)"
    else:
        try:
            speed = timed(
                {**models, "int8_openvino": result.model},
                min_seconds=1.5 * seconds,
                runtime={"fp32": "onnxruntime", "int8": "onnxruntime", "int8_openvino": "openvino"},
            )
            in_openvino = speed.pop("int8_openvino")
            return speed, openvino_offer(in_openvino, speed["int8"])
        except RuntimeError as error:  # it cannot read, compile or run an op of ONNX Runtime's
            why = error_line(error)
    return timed(models, min_seconds=seconds), {"advice": f"not timed in OpenVINO: {why}"}


def openvino_offer(in_openvino: dict, in_onnxruntime: dict) -> dict:
    """The INT8 model's speed in OpenVINO over ONNX Runtime, and `--runtime openvino` offered
    where OpenVINO runs it WIN_MARGIN faster: made for OpenVINO, a model runs there in the form
    its kernels run fastest, at least as fast (docs/peers.md)."""
    ratio = in_openvino["throughput"] / in_onnxruntime["throughput"]
    if ratio >= 1 + WIN_MARGIN:
        advice = (
            f"OpenVINO runs this INT8 model {ratio:.2f}x as fast as ONNX Runtime on this CPU: "
            "if you can serve with OpenVINO, quantize with --runtime openvino, which makes it "
            "for OpenVINO and measures its fidelity there"
        )
    else:
        advice = f"OpenVINO runs this INT8 model {ratio:.2f}x as fast: ONNX Runtime is the one here"
    return {"throughput": in_openvino, "over_onnxruntime": ratio, "advice": advice}


def write(report: dict, html_path: Path) -> Path:
    """Write `html_path` and the same data as JSON beside it; returns the JSON path."""
    html_path = Path(html_path)
    json_path = html_path.with_suffix(".json")
    data = dict(
        report,
        sections=[
            {k: v for k, v in section.items() if k != "html"}
            for section in report.get("sections", [])
        ],
    )
    write_text(json_path, json.dumps(data, indent=2, default=float))
    write_text(html_path, _html(report))
    return json_path


def _html(r: dict) -> str:
    e = html.escape
    rows = []
    if "metric" in r:
        m = r["metric"]
        rows.append(
            f"<tr><th>{e(m['name'])}</th><td>{m['fp32']:.3f}</td><td>{m['int8']:.3f}</td><td>drop {m['drop']:.3f}</td></tr>"
        )
    if "throughput" in r:
        t = r["throughput"]
        rows.append(
            f"<tr><th>samples/s (batch {t['fp32']['batch']})</th><td>{t['fp32']['throughput']:.1f}</td><td>{t['int8']['throughput']:.1f}</td><td>{t['speedup']:.2f}x</td></tr>"
        )
    s = r["size_bytes"]
    rows.append(
        f"<tr><th>size (MB)</th><td>{s['fp32'] / 1e6:.2f}</td><td>{s['int8'] / 1e6:.2f}</td><td>{s['fp32'] / max(s['int8'], 1):.2f}x smaller</td></tr>"
    )
    for name, db in r["output_sqnr_db"].items():
        rows.append(
            f"<tr><th>output SQNR {e(name)}</th><td colspan=3>{db:.1f} dB ({e(r['sqnr_samples'])})</td></tr>"
        )
    rows.append(f"<tr><th>weights</th><td colspan=3>{e(weights_text(r['weights']))}</td></tr>")
    rows.append(f"<tr><th>speed check</th><td colspan=3>{e(r['speed_check'])}</td></tr>")
    if r.get("openvino"):
        rows.append(f"<tr><th>OpenVINO</th><td colspan=3>{e(r['openvino']['advice'])}</td></tr>")
    rows.append(f"<tr><th>bias correction</th><td colspan=3>{e(r['bias_correction'])}</td></tr>")
    rows.append(f"<tr><th>smoothing</th><td colspan=3>{e(r['smoothing'])}</td></tr>")
    if r["group_cost"]:
        rows.append(f"<tr><th>fallback group cost</th><td colspan=3>{e(r['group_cost'])}</td></tr>")
    coverage = "".join(
        f"<tr><td>{e(op)}</td><td>{c['int8']}</td><td>{c['fp32']}</td></tr>"
        for op, c in r["coverage"]["by_op_type"].items()
    )
    fp32_nodes = "".join(
        f"<tr><td>{e(n['name'])}</td><td>{e(n['op_type'])}</td><td>{e(n['reason'])}</td></tr>"
        for n in r["coverage"]["fp32_nodes"]
    )
    kernels = "".join(
        f"<tr><td>{e(kind)}</td><td>{e(', '.join(f'{k} x{v}' for k, v in ops.items()))}</td></tr>"
        for kind, ops in r["coverage"]["ort_kernels"].items()
    )
    layers = sorted(r["layer_sqnr_db"].items(), key=lambda kv: kv[1])
    top = max((db for _, db in layers if db != float("inf")), default=1.0) or 1.0
    layer_rows = "".join(
        f"<tr><td>{e(name)}</td><td>{db:.1f}</td><td><div class=bar style='width:{max(0.0, min(db, top)) / top * 300:.0f}px'></div></td></tr>"
        for name, db in layers
    )
    isa = r.get("isa", {})
    sections = "".join(
        f"<h2>{e(section['title'])}</h2>{section['html']}" for section in r.get("sections", [])
    )
    return f"""<!doctype html><html><head><meta charset=utf-8><title>quantize report</title><style>
body{{font-family:system-ui,sans-serif;margin:2em;max-width:70em}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}} .bar{{background:#4a7;height:.8em}}
</style></head><body>
<h1>INT8 validation report</h1>
<p style="font-size:120%"><b>Verdict: {"fidelity is LOW" if r["fidelity"]["verdict"] == "low" else "fidelity ok"}</b>{": " + e(r["fidelity"]["advice"]) if "advice" in r["fidelity"] else f" (output SQNR at least {r['fidelity']['output_sqnr_db_min']:.1f} dB, floor {OUTPUT_FLOOR_DB:g} dB)"}.</p>
<p>Recipe: <code>{e(json.dumps(r["recipe"]))}</code><br>Calibration: {r["calibration"]["samples"]} samples in {r["calibration"]["seconds"]} s.
{f"<br>CPU: {e(isa.get('cpu', ''))}; INT8 path: {e(isa.get('int8_gemm_path', ''))}; ONNX Runtime {e(isa.get('onnxruntime', ''))}" if isa else ""}</p>
<h2>FP32 vs INT8</h2><table><tr><th></th><th>FP32</th><th>INT8</th><th></th></tr>{"".join(rows)}</table>
<h2>INT8 coverage by op type</h2><table><tr><th>op</th><th>INT8</th><th>FP32</th></tr>{coverage}</table>
<h2>Nodes left in FP32, and why</h2><table><tr><th>node</th><th>op</th><th>reason</th></tr>{fp32_nodes or "<tr><td colspan=3>none</td></tr>"}</table>
<h2>Kernels ONNX Runtime executes</h2><table>{kernels}</table>
{sections}
<h2>Per-layer SQNR (dB, worst first)</h2><table><tr><th>tensor</th><th>dB</th><th></th></tr>{layer_rows}</table>
</body></html>
"""
