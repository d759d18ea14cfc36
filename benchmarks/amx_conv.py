"""`python -m benchmarks.amx_conv`: on an AMX CPU, what putting Convs on AMX tiles buys (their
int8 weights stored for ONNX Runtime's GEMM path: passes/amx_conv_weights.py), in one run.

Per model (ResNet-50 at 32x32 and 224x224, the demo model: speed does not depend on training;
the zoo's CNNs at the batch they serve): quantized as the CLI quantizes it for this CPU (bias
correction aside), kernel timing choosing which Convs go on the tiles, then the same calibration
lowered with every Conv in ORT's symmetric kernel (VNNI), both timed against the cleaned FP32
graph. Per Conv, at the served shape: its one-node INT8 model in both forms, beside whether
kernel timing timed it (large enough: `kernel_timing.TILES_MIN_*`) and took the tiles. Writes
benchmarks/results/amx_conv_amx.{json,md}; on another CPU it measures nothing.
"""

from dataclasses import replace

import numpy as np
import onnx
import onnx_ir as ir

from benchmarks.results import shape_text, sized, write_results
from benchmarks.zoo.run import all_models, calibrated
from models.resnet50.build import DEMO, build
from quantize import Recipe, RunOptions, quantize
from quantize.bench import compare_sessions
from quantize.kernel_timing import (
    Boundaries,
    _input_shapes,
    _one_node_model,
    _signature,
    _tiles_candidate,
)
from quantize.pipeline import keep_fp32
from quantize.recipe import preset, preset_for
from quantize.target import WEIGHT_FORMATS, host_target

TITLE = "# Convs on AMX tiles: int8 weights stored for ORT's GEMM path against its symmetric kernel"
CNNS = ("PP-OCRv4 detector", "PP-OCRv4 recogniser", "YOLOv8n")  # the classifier stays FP32 whole
RESNET_SIZES = (32, 224)
SIZES = sized(
    {"calibration": 128, "evaluation": 12, "seconds": 6.0, "conv_seconds": 0.6},
    {"calibration": 16, "evaluation": 12, "seconds": 0.3, "conv_seconds": 0.05},
)
THREADS = 2
INT8 = WEIGHT_FORMATS["int8"]


def _recipe(fp32: ir.Model) -> Recipe:
    """The CLI's preset for `fp32`, for amx; bias correction, which changes no speed, off."""
    return replace(preset(preset_for(fp32), fp32), target="amx", bias_correction=False)


def _record(name: str, result, feeds: dict) -> dict:
    symmetric = keep_fp32(
        replace(result, calibration=replace(result.calibration, amx_convs=frozenset())), {}
    )
    forms = {"fp32": result.fp32_model, "symmetric": symmetric.model, "tiles": result.model}
    speed = compare_sessions(forms, feeds, THREADS, SIZES["seconds"], rounds=8, min_block=1)
    convs = _convs(result, feeds)
    return {
        "name": name,
        "bench_shape": {k: list(v.shape) for k, v in feeds.items()},
        "convs": sum(c["count"] for c in convs),
        "convs_on_tiles": len(result.calibration.amx_convs),
        "ms": {form: speed[form]["latency_ms_p50"] for form in forms},
        "tiles_over_symmetric": speed["tiles"]["throughput"] / speed["symmetric"]["throughput"],
        "symmetric_over_fp32_cleaned": speed["symmetric"]["throughput"]
        / speed["fp32"]["throughput"],
        "tiles_over_fp32_cleaned": speed["tiles"]["throughput"] / speed["fp32"]["throughput"],
        "kernel_timing": result.timing_check,
        "conv_timings": convs,
    }


def _convs(result, feeds: dict) -> list[dict]:
    """Each distinct non-depthwise INT8 Conv of `result` at its served shape, in both forms."""
    graph = result.calibration.graph
    int8 = {d.name for d in result.decisions if d.precision == "int8"}
    convs = [
        n
        for n in graph.graph
        if n.name in int8
        and n.op_type == "Conv"
        and n.inputs[1].const_value.shape[1] * n.attributes.get_int("group", 1) > 1
        and n.attributes.get_int("group", 1) != n.inputs[1].const_value.shape[0]
    ]
    shapes = _input_shapes(result.fp32_model, convs, feeds, THREADS)
    measured: dict[tuple, dict] = {}
    for node in convs:
        shape = shapes[node.inputs[0].name]
        key = _signature(node, shape)
        if key in measured:
            measured[key]["count"] += 1
            measured[key]["on_tiles"] += node.name in result.calibration.amx_convs
            continue
        forms = {
            form: _one_node_model(
                node, shape, "int8", INT8, Boundaries(True, True), form == "tiles"
            )
            for form in ("symmetric", "tiles")
        }
        x = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
        ms = compare_sessions(forms, {"x": x}, THREADS, SIZES["conv_seconds"], 3, 2)
        weight = node.inputs[1].const_value.shape.dims
        measured[key] = {
            "input": list(shape),
            "weight": list(weight),
            "group": node.attributes.get_int("group", 1),
            "count": 1,
            "timed": _tiles_candidate(node, INT8),
            "on_tiles": int(node.name in result.calibration.amx_convs),
            "symmetric_ms": ms["symmetric"]["latency_ms_p50"],
            "tiles_ms": ms["tiles"]["latency_ms_p50"],
        }
    return list(measured.values())


def _resnet50_records() -> list[dict]:
    cache = build(DEMO)
    calib = np.load(cache / "calib.npz")["image"][: SIZES["calibration"]]
    fp32 = ir.serde.deserialize_model(onnx.load(str(cache / "resnet50.onnx")))
    records = []
    for size in RESNET_SIZES:
        up = size // calib.shape[1]
        images = calib.repeat(up, 1).repeat(up, 2)
        feeds = {"image": np.resize(images, (32, *images.shape[1:]))}
        result = quantize(
            cache / "resnet50.onnx",
            [{"image": images[i : i + 8]} for i in range(0, len(images), 8)],
            _recipe(fp32),
            RunOptions(threads=THREADS, batch_size=8, serve_batch=32),
        )
        records.append(_record(f"ResNet-50 at {size}x{size}", result, feeds))
    return records


def _zoo_records() -> list[dict]:
    records = []
    for model in (m for m in all_models() if m.name.startswith(CNNS)):
        fp32 = ir.serde.deserialize_model(onnx.load(str(model.build())))
        feeds = model.evaluation(SIZES["evaluation"])[0]
        batch = len(next(iter(feeds.values())))
        options = RunOptions(threads=THREADS, serve_batch=batch)
        result = calibrated(model, _recipe(fp32), SIZES["calibration"], options)
        records.append(_record(model.name, result, feeds))
    return records


def _table(records: list[dict]) -> str:
    rows = [
        f"| {r['name']} | {shape_text(r['bench_shape'])} "
        f"| {r['convs_on_tiles']} of {r['convs']} | {r['symmetric_over_fp32_cleaned']:.2f}x "
        f"| **{r['tiles_over_fp32_cleaned']:.2f}x** | {r['tiles_over_symmetric']:.2f}x "
        f"| {_one_node_sums(r['conv_timings'])} |"
        for r in records
    ]
    return "\n".join(
        [
            "| model | served shape | Convs on AMX tiles (kernel timing's choice) | INT8, every "
            "Conv in ORT's symmetric kernel: x FP32 cleaned | INT8, the chosen Convs on AMX "
            "tiles: x FP32 cleaned | tiles over symmetric | one-node Convs, ms a batch: all "
            "symmetric / each in its faster form / as chosen |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


def _one_node_sums(convs: list[dict]) -> str:
    """The one-node Convs' summed ms: all in the symmetric kernel, each in its faster form (the
    best kernel timing could choose), and as kernel timing chose."""
    symmetric = sum(c["symmetric_ms"] * c["count"] for c in convs)
    best = sum(min(c["symmetric_ms"], c["tiles_ms"]) * c["count"] for c in convs)
    chosen = sum(
        c["tiles_ms"] * c["on_tiles"] + c["symmetric_ms"] * (c["count"] - c["on_tiles"])
        for c in convs
    )
    return f"{symmetric:.2f} / {best:.2f} / {chosen:.2f}"


def main() -> None:
    if host_target() != "amx":
        print(f"benchmarks.amx_conv: nothing to measure, this CPU's INT8 path is {host_target()}")
        return
    records = [*_resnet50_records(), *_zoo_records()]
    markdown = (
        f"{TITLE}\n\n{_table(records)}\n\nWhole models at the served batch, {THREADS} threads, "
        "medians of interleaved rounds; every Conv's one-node timings are in the JSON "
        "(`conv_timings`)."
    )
    write_results("amx_conv_amx", {"models": records}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
