"""Every zoo model quantized by the CLI with its defaults and the batch it is served at
(`quantize MODEL --calib DATA --serve-batch N`), its task
fidelity against FP32, and its speed against FP32 (as exported, and after quantize's clean-up: the
graph INT8 starts from) and against the rivals set up as their docs advise: ONNX Runtime's
quantize_static and quantize_dynamic, and NNCF run by OpenVINO; ours is also made for OpenVINO
(`--runtime openvino`) and run by it. A rival that fails is recorded with its error. Speed is
timed twice: one instance on all cores, and a single-thread instance on each core, all at once
(the batcher's layout, `per_core`)."""

import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from benchmarks.rivals import nncf_int8, ort_quantize_dynamic, ort_quantize_static
from benchmarks.zoo import captcha, easyocr, layout, minilm, ppocr, yolo
from benchmarks.zoo.zoo_model import ZooModel
from quantize import fallback
from quantize.bench import compare, compare_per_core
from quantize.pipeline import WHOLE_FP32, QuantizeResult, cleaned_fp32, input_specs, quantize
from quantize.recipe import Recipe, RunOptions, preset, preset_for
from quantize.runtime import served_sessions, session

FULL = {"calibration": 256, "evaluation": 120, "seconds": 8.0}
# few samples and no timing at all, so neither the CLI's per-node kernel timing nor its fallback
# trials nor its bias correction (a lowering per Conv): `make bench-quick`, and the suite
# (tests/test_zoo.py)
REDUCED = {
    "calibration": 16,
    "evaluation": 12,
    "seconds": 0.0,
    "rivals": False,
    "cli_options": ("--no-kernel-timing", "--keep-low-fidelity", "--no-bias-correction"),
}
# Timing blocks of seconds / ROUNDS (0.5 s in the full run), the models in turn: the speed of a
# shared VM drifts over seconds, and blocks of 2 s let one model meet a slow spell that the
# model it is compared with misses (the recogniser's INT8 read 0.88x and 1.61x its FP32 graph
# minutes apart, docs/zoo.md).
ROUNDS = 16
RIVALS = ("ort_static", "ort_dynamic", "nncf_openvino", "int8_openvino")
# Run by OpenVINO, compiled for each input's shapes as it serves (`served_sessions`); the rest by
# ONNX Runtime.
OPENVINO = ("nncf_openvino", "int8_openvino")


def all_models() -> list[ZooModel]:
    return [
        *minilm.models(),
        *ppocr.models(),
        *yolo.models(),
        *layout.models(),
        *captcha.models(),
        *easyocr.models(),
    ]


def untimed_recipe(fp32: ir.Model) -> Recipe:
    """The CLI's auto preset for `fp32` with kernel timing off, so that lowerings of one
    calibration differ only where a benchmark makes them differ."""
    return preset(preset_for(fp32), fp32, kernel_timing=False)


def calibrated(
    model: ZooModel, recipe: Recipe, samples: int, options: RunOptions = RunOptions()
) -> QuantizeResult:
    """`model` quantized under `recipe` on its first `samples` calibration samples."""
    with tempfile.TemporaryDirectory() as tmp:
        calib = Path(tmp) / "calib.npz"
        np.savez(calib, **model.calibration(samples))
        return quantize(model.build(), calib, recipe, options)


def run_model(
    model: ZooModel,
    calibration: int,
    evaluation: int,
    seconds: float,
    rivals: bool = True,
    cli_options: tuple[str, ...] = (),
) -> dict:
    """Quantize `model` as a user would (the CLI's defaults, told the batch it will be served at,
    plus `cli_options`), then measure fidelity (and speed when `seconds`), of ONNX Runtime's
    quantizers too when `rivals`."""
    path = model.build()
    feeds = model.evaluation(evaluation)
    batch = len(next(iter(feeds[0].values())))
    cli_options = ("--serve-batch", str(batch), *cli_options)
    fp32 = onnx.load(path)
    record = {
        "name": model.name,
        "exporter": model.exporter,
        "opset": next(o.version for o in fp32.opset_import if o.domain in ("", "ai.onnx")),
        "fidelity_target": model.fidelity_target,
        "fidelity": None,
        "meets_fidelity": False,
        "int8_over_fp32_cleaned": None,
        "int8_over_ort_static": None,
    }
    with tempfile.TemporaryDirectory() as tmp:
        calib = Path(tmp) / "calib.npz"
        np.savez(calib, **model.calibration(calibration))
        start = time.perf_counter()
        run, int8 = quantize_cli(path, calib, cli_options)
        record["quantize_seconds"] = {"int8": time.perf_counter() - start}
        record["status"] = cli_status(run)
        if int8 is None:
            return record
        summary = json.loads(run.stdout)
        variants = {"fp32": fp32, "fp32_cleaned": cleaned_fp32(path), "int8": int8}
        record.update(
            preset=summary["preset"],
            target=summary["recipe"]["target"],
            verdict=summary["fidelity"]["verdict"],
            kernel_timing=summary["kernel_timing"],
            speed_check=summary["speed_check"],
            bias_correction=summary["bias_correction"],
            smoothing=summary["smoothing"],
            weights=summary["weights"]["format"],
            weight_choice=summary["weights"]["choice"],
            amx_tile_convs=summary["weights"]["amx_tile_convs"],
            **_fidelity_floor(summary),
        )
        record["rivals"] = {}
        for name, make in (
            ()
            if not rivals
            else (
                (
                    "ort_static",
                    lambda: (
                        ort_quantize_static(
                            fp32,
                            model.calibration(calibration),
                            fixed_batch(fp32) or 8,
                            transformer=model.transformer,
                        ),
                        {},
                    ),
                ),
                ("ort_dynamic", lambda: (ort_quantize_dynamic(fp32), {})),
                (
                    "nncf_openvino",
                    lambda: (
                        nncf_int8(path, model.calibration(calibration), model.transformer),
                        {},
                    ),
                ),
                ("int8_openvino", lambda: made_for_openvino(path, calib, cli_options)),
            )
        ):
            try:
                start = time.perf_counter()
                variants[name], made = make()
                record["quantize_seconds"][name] = time.perf_counter() - start
                record["rivals"][name] = {"status": "ok", **made}
            except Exception as exc:  # a rival's failure is a result, recorded as it reads
                record["rivals"][name] = {"status": _error_line(exc)}
    outputs, runners = {}, {}
    for name, variant in list(variants.items()):
        try:
            runtime = "openvino" if name in OPENVINO else "onnxruntime"
            served = served_sessions(variant, feeds, runtime=runtime)
            outputs[name] = [runner.run(None, feed) for runner, feed in zip(served, feeds)]
            runners[name] = served[0]  # the one timed, on feeds[0]
        except Exception as exc:
            record["rivals"][name] = {"status": f"does not run: {_error_line(exc)}"}
            del variants[name]
    fidelity = {
        name: model.fidelity(feeds, outputs["fp32"], outputs[name])
        for name in outputs
        if name != "fp32"
    }
    record["fidelity"], record["meets_fidelity"] = (
        fidelity["int8"]["value"],
        fidelity["int8"]["meets"],
    )
    record["fidelity_detail"] = fidelity
    shifted = [_shifted_one_pixel(feed) for feed in feeds]
    if all(shifted):
        fp32_shifted = [runners["fp32"].run(None, feed) for feed in shifted]
        record["fp32_shifted_one_pixel"] = model.fidelity(feeds, outputs["fp32"], fp32_shifted)
    if seconds:
        calls = {name: partial(runner.run, None, feeds[0]) for name, runner in runners.items()}
        speed = compare(calls, batch, min_seconds=seconds, rounds=ROUNDS)
        ours = speed["int8"]["throughput"]
        record["throughput"] = {name: s["throughput"] for name, s in speed.items()}
        record["bench_shape"] = {k: list(v.shape) for k, v in feeds[0].items()}
        for name in ("fp32_cleaned", "fp32", *RIVALS):
            record[f"int8_over_{name}"] = (
                ours / speed[name]["throughput"] if name in speed else None
            )
        record["per_core"] = _per_core(variants, feeds[0], batch, seconds)
    return record


def _per_core(variants: dict, feed: dict, batch: int, seconds: float) -> dict:
    """Samples/s of each ONNX Runtime variant with a single-thread instance on each core (the
    batcher's layout), and ours over each of the others. Not OpenVINO's: it pins its own
    threads, and its throughput layout is its own streams."""
    cores = len(os.sched_getaffinity(0))
    calls = {
        name: [partial(session(variant, 1).run, None, feed) for _ in range(cores)]
        for name, variant in variants.items()
        if name not in OPENVINO
    }
    speed = {
        name: s["throughput"] for name, s in compare_per_core(calls, batch, seconds, ROUNDS).items()
    }
    return {
        "instances": cores,
        "throughput": speed,
        **{f"int8_over_{name}": speed["int8"] / speed[name] for name in speed if name != "int8"},
    }


def fixed_batch(model: onnx.ModelProto) -> int | None:
    """The batch the model's first input is fixed at, if it is (a name, 0 or -1: free)."""
    return input_specs(model)[0].shape[0]


def _shifted_one_pixel(feed: dict) -> dict | None:
    """`feed` with its images moved one pixel right (wrapping round), or None if it has no
    image: how strict a target is, read as FP32 scored against itself on an input no reader
    would call different."""
    images = [name for name, x in feed.items() if x.ndim == 4 and x.dtype == np.float32]
    if not images:
        return None
    return {name: np.roll(x, 1, axis=-1) if name in images else x for name, x in feed.items()}


def quantize_cli(path: Path, calib: Path, options: tuple[str, ...]):
    """`quantize PATH --calib CALIB --json OPTIONS`: the finished run, and the INT8 model it
    wrote (None if it failed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "int8.onnx"
        run = subprocess.run(
            [sys.executable, "-m", "quantize", str(path), "--calib", str(calib)]
            + ["-o", str(out), "--json", *options],
            capture_output=True,
            text=True,
        )
        return run, (onnx.load(out) if run.returncode == 0 else None)


def made_for_openvino(
    path: Path, calib: Path, options: tuple[str, ...]
) -> tuple[onnx.ModelProto, dict]:
    """Ours as a user who serves with OpenVINO makes it (`--runtime openvino`), and what its
    speed check and its fidelity floor in OpenVINO did."""
    run, int8 = quantize_cli(path, calib, (*options, "--runtime", "openvino"))
    if int8 is None:
        raise RuntimeError(cli_status(run))
    summary = json.loads(run.stdout)
    return int8, {"speed_check": summary["speed_check"], **_fidelity_floor(summary)}


def _fidelity_floor(summary: dict) -> dict:
    """From the CLI's --json summary: the worst output SQNR on held-out samples, the nodes its
    fidelity floor sent back to FP32 for it, and what each group step it weighed cost in time."""
    return {
        "output_sqnr_db": summary["fidelity"]["output_sqnr_db_min"],
        "group_cost": summary["group_cost"],
        "accuracy_fallback": [
            n["name"]
            for n in summary["coverage"]["fp32_nodes"]
            if n["reason"].startswith(fallback.REASON)
        ],
    }


def cli_status(run: subprocess.CompletedProcess) -> str:
    if run.returncode == 0:
        return "ok"
    lines = run.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {run.returncode}"


def _error_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def rival_fidelity(record: dict, name: str) -> str:
    """A rival's fidelity against the model's target, "(FP32 kept)" after it where its own speed
    check kept the whole model FP32 (ours made for OpenVINO), or how it failed ("does not run:
    InvalidGraph"; the JSON has it all)."""
    detail = record.get("fidelity_detail", {}).get(name)
    rival = record.get("rivals", {}).get(name, {})
    if detail:
        kept = WHOLE_FP32 in rival.get("speed_check", "")  # ours made for OpenVINO: FP32 there
        verdict = f"{detail['value']:.4f} {'meets' if detail['meets'] else 'misses'}"
        return verdict + _read_out(detail) + (" (FP32 kept)" if kept else "")
    return ":".join(rival.get("status", "-").split(":")[:2])


def over_fp32_cleaned(record: dict) -> str:
    # the speed check's whole-FP32 model is the cleaned graph itself: its ratio is timing noise
    kept = WHOLE_FP32 in record.get("speed_check", "")
    return ratio(record["int8_over_fp32_cleaned"]) + (" (FP32 kept: same graph)" if kept else "")


def fidelity_verdict(record: dict) -> str:
    value = "-" if record["fidelity"] is None else f"{record['fidelity']:.4f}"
    read_out = _read_out(record.get("fidelity_detail", {}).get("int8"))
    return f"{value} {'meets' if record['meets_fidelity'] else 'misses'}{read_out}"


def _read_out(detail: dict | None) -> str:
    """A detector's own read-out beside a metric that is not it (YOLOv8n's anchors): the F1 of
    the detections it reports against FP32's."""
    if not detail or "detection_f1" not in detail:
        return ""
    return f" (detections F1 {detail['detection_f1']:.4f})"


def table(records: list[dict]) -> str:
    """The results as a Markdown table, a row per model."""

    def seconds(r):  # to quantize; ours is the CLI's wall time, process start included
        taken = r.get("quantize_seconds")
        if not taken:
            return "-"
        names = ("int8", "ort_static", "ort_dynamic", "nncf_openvino", "int8_openvino")
        return " / ".join(f"{taken[n]:.0f}" if n in taken else "-" for n in names)

    def shifted(r):
        detail = r.get("fp32_shifted_one_pixel")
        return "-" if detail is None else f"{detail['value']:.4f}{_read_out(detail)}"

    rows = [
        f"| {r['name']} | {r['exporter']} | {r['opset']} | {r['status']} | {r.get('preset', '-')} "
        f"| {r.get('weights', '-')} | {fidelity_verdict(r)} "
        f"| {r['fidelity_target']} | {shifted(r)} | {over_fp32_cleaned(r)} "
        f"| {ratio(r.get('per_core', {}).get('int8_over_fp32_cleaned'))} "
        f"| {ratio(r.get('int8_over_fp32'))} "
        f"| {ratio(r['int8_over_ort_static'])} | {ratio(r.get('int8_over_ort_dynamic'))} "
        f"| {ratio(r.get('int8_over_nncf_openvino'))} | {ratio(r.get('int8_over_int8_openvino'))} "
        f"| {rival_fidelity(r, 'ort_static')} | {rival_fidelity(r, 'ort_dynamic')} "
        f"| {rival_fidelity(r, 'nncf_openvino')} | {rival_fidelity(r, 'int8_openvino')} "
        f"| {seconds(r)} |"
        for r in records
    ]
    return "\n".join(
        [
            "| model | exporter | opset | status | preset (auto) | weights | fidelity | target "
            "| FP32 itself, input 1 pixel off | x FP32 cleaned "
            "| x FP32 cleaned, a 1-thread instance per core | x FP32 as exported "
            "| x ORT static | x ORT dynamic | x NNCF (OpenVINO) | x ours made for OpenVINO "
            "| ORT static fidelity | ORT dynamic fidelity | NNCF fidelity "
            "| ours made for OpenVINO fidelity "
            "| s to quantize: ours (CLI) / ORT static / ORT dynamic / NNCF "
            "/ ours made for OpenVINO (CLI) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
