"""`quantize(model, calib, recipe)`: the one entry point from an FP32 model to an INT8 one.

frontend.load_model -> passes.cleanup -> calibration -> policy + plan
  -> passes.lower_to_qdq -> coverage check in ORT's optimized graph (drop float islands)
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import onnx
import onnx_ir as ir

from calibration import (
    CalibrationSource,
    ImagePreprocess,
    InputSpec,
    collect_channel_absmax,
    collect_histograms,
    open_calibration,
)
from calibration.histogram import BEYOND_LIMIT
from onnxio import InputError
from quantize import bench, bias_correction, coverage, kernel_timing, passes
from quantize.frontend import load_model
from quantize.passes.drop_idle_scaling import idle_scaling_muls
from quantize.passes.smooth_activations import scaling_muls, smoothing_scales, weight_gemm_readers
from quantize.plan import QuantPlan, make_plan
from quantize.policy import (
    NodeDecision,
    Selection,
    clamps_at_zero,
    decisions,
    is_float,
    on_uint8,
    ort_only,
    outside_convs,
    select_nodes,
    sent_back,
)
from quantize.recipe import AUTO_ALPHA, RECIPE_KEY, Recipe, RunOptions, SmoothQuant
from quantize.runtime import session
from quantize.target import TARGET_KEY, WEIGHT_FORMATS, WEIGHTS_KEY, host_target
from quantize.validate import Reference, layer_sqnr, reference_outputs, sqnr_against

__version__ = "0.1.0"
PREPROCESS_KEY = "quantize.preprocess"
WHOLE_FP32 = "the whole model stays FP32"  # the speed check's verdict, as its reason ends
UNMEASURED = "not measured"  # a result's speed check until one is made on its INT8 nodes
BIAS_SAMPLES = 16  # calibration samples the bias corrections are measured on
WIN_MARGIN = 0.05  # the share of FP32's time an INT8 model must save to be kept
# a first timing showing less saved than this is re-timed, twice as long, and that decides: on a
# shared 2-core VM two timings minutes apart differed by 25 % (docs/zoo.md)
CLOSE_CALL = 0.15
# ... unless it shows INT8 this much slower than FP32: a 25 % drift cannot make that a win
CLEAR_LOSS = 0.5
# the share of time (and at least MIN_GAIN_MS) a whole model must save, with the nodes kernel
# timing kept FP32 in INT8, to take them INT8: a margin for timing noise, as they cost accuracy
CONFIRM_MARGIN = 0.03
CHECK_SECONDS = 2.0  # a first timing of whole models


@dataclass(frozen=True)
class Calibration:
    """What lowering needs and is cheap to keep: the models, the INT8 candidates and the
    activation histograms (fixed size), so a result can be lowered again without recalibrating."""

    original: ir.Model  # as loaded, read only
    graph: ir.Model  # the clean FP32 model, read only: each lowering works on a clone
    clean: onnx.ModelProto  # the same, for ONNX Runtime and the result
    selection: Selection  # after kernel timings and ranges sent nodes back to FP32
    histograms: dict
    samples: int
    seconds: float
    # Conv -> what its bias drops, applied by every lowering (quantize/bias_correction.py), and
    # the calibration batches that measured it, to measure it again for other weights
    bias_shifts: dict = field(default_factory=dict)
    bias_batches: list = field(default_factory=list, repr=False)
    # Convs kernel timing found faster on AMX tiles (kernel_timing.faster_on_amx_tiles)
    amx_convs: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CalibrationSamples:
    """The samples that calibrate: the first `count` of `source`, read in batches of
    `batch_size`, the model run on `threads`."""

    source: CalibrationSource
    count: int
    batch_size: int
    threads: int

    def histograms(
        self,
        model: onnx.ModelProto,
        tensors: list[str],
        progress: Callable[[int, int], None] = lambda done, total: None,
    ) -> dict:
        return collect_histograms(
            model, tensors, self.source, self.count, self.batch_size, self.threads, progress
        )

    def channel_absmax(self, model: onnx.ModelProto, tensors: list[str]) -> dict:
        return collect_channel_absmax(
            model, tensors, self.source, self.count, self.batch_size, self.threads
        )


@dataclass
class QuantizeResult:
    model: onnx.ModelProto
    fp32_model: onnx.ModelProto
    recipe: Recipe  # with its target and weight format resolved
    options: RunOptions
    decisions: list[NodeDecision]
    kernels: dict
    calibration_samples: int
    calibration_seconds: float
    output_sqnr_db: dict[str, float]
    sqnr_samples: str
    floors: dict[str, float] = field(repr=False)  # the plan's (quantize/plan.py)
    held_out: list[dict] = field(repr=False)
    # the clean FP32 graph's outputs on held_out, before smoothing
    fp32_outputs: Reference = field(repr=False)
    calibration: Calibration = field(repr=False)
    speed_check: str = UNMEASURED  # what keep_fp32_unless_faster measured and did
    weight_choice: str = ""  # why choose_weights took the recipe's weight format, if it chose
    bias_correction: str = "off"  # what correcting the Convs' biases measured and did
    smoothing: str = "off"  # the SmoothQuant alpha taken, and if chosen, what was measured
    timing_check: str = ""  # what the whole model measured of kernel timing's FP32 nodes, if any
    group_cost: str = ""  # what each group step of the accuracy fallback cost in time, if any

    @cached_property
    def layer_sqnr_db(self) -> dict[str, float]:
        """SQNR of each quantized activation on the first held-out batch. Measured when first
        read, not at each lowering: the fallback and the weight choice lower many models and
        judge them by their outputs; only the model the user gets is reported layer by layer."""
        return layer_sqnr(
            self.fp32_model, self.model, self.floors, self.held_out[0], self.options.threads
        )

    @cached_property
    def served_feeds(self) -> dict[str, np.ndarray]:
        """The first held-out batch at the batch the model will be served at: what is timed."""
        return served(self.held_out[0], self.options.serve_batch)


def quantize(
    model_path,
    calib,
    recipe: Recipe = Recipe(),
    options: RunOptions = RunOptions(),
    image_preprocess: ImagePreprocess | None = None,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> QuantizeResult:
    """Quantize an FP32 model to INT8 with ranges calibrated on representative data.

    The input model is never modified; the INT8 model is returned in the result, not written.

    Args:
        model_path: an `.onnx` file, a TensorFlow SavedModel directory or a Keras `.keras`/`.h5` file.
        calib: the calibration data: a `.npy`/`.npz`/HDF5 file or image directory (samples in
            order; the first `options.calib_samples` calibrate, the next `held_out_samples`
            measure SQNR), or a list of feed dicts (input name -> batch array).
        recipe: what to quantize and how, for which CPU target (`"auto"`: this machine's INT8 path).
        options: threads, batch size, calibration and held-out sample counts, the served
            batch, the whole-model speed check (`RunOptions`).
        image_preprocess: how an image directory becomes input tensors; by default the recipe
            the model carries in its metadata, if any.
        progress: called with (samples done, samples in all) during calibration.

    Returns:
        A QuantizeResult: the INT8 model, the cleaned FP32 model it was made from, each node's
        INT8/FP32 decision with its reason, the kernels ORT runs, and output and per-layer SQNR.

    Raises:
        InputError: a file or argument is unusable; the message names it and says why.

    Example:
        >>> result = quantize("model.onnx", "calib.npz", Recipe(ranges=Entropy()))
        >>> onnxio.save_model(result.model, "model.int8.onnx")
    """
    recipe = recipe.resolved()
    original = load_model(model_path)
    _check_float32(original, model_path)
    graph = passes.cleanup(original.clone(), recipe.runtime)
    clean = _for_ort(graph)
    inputs = input_specs(clean)
    source = open_calibration(calib, inputs, image_preprocess or _recipe_preprocess(original))
    batch_size, fixed = _batch_size(inputs, options, model_path)
    n_cal, held_range = _split(source.num_samples, options, batch_size if fixed else 1, source.path)
    held_out = list(source.batches(*held_range, batch_size))
    reference = _outputs(_for_ort(original), held_out[0], model_path)
    _check_cleanup(reference, clean, held_out[0])

    selection = _select(graph, recipe)
    _check_refined_convs(graph, selection.int8, recipe, model_path)
    fp32_outputs = reference_outputs(clean, held_out, options.threads)
    samples = CalibrationSamples(source, n_cal, batch_size, options.threads)
    start = time.perf_counter()
    scaling_muls: dict[str, str] = {}
    smoothing = "off"
    if recipe.smoothing is not None:
        absmax = _smoothed_inputs_absmax(clean, graph, selection.int8, samples)
        alpha, smoothing = _alpha(recipe, graph, absmax, samples, held_out, fp32_outputs)
        recipe = replace(recipe, smoothing=SmoothQuant(alpha))
        scaling_muls = _smooth(graph, absmax, alpha)
        clean = _for_ort(graph)
        _check_cleanup(reference, clean, held_out[0])
        selection = _select(graph, recipe, scaling=scaling_muls)
    served_feeds = served(held_out[0], options.serve_batch)
    amx_convs = _faster_on_amx_tiles(clean, graph, selection.int8, served_feeds, recipe, options)
    kept_fp32 = _slower_in_int8(
        clean, graph, selection.int8, served_feeds, recipe, options.threads, amx_convs
    )
    selection, untimed, histograms = _calibrated_selections(
        graph, clean, recipe, kept_fp32, scaling_muls, samples, progress
    )
    calibration = Calibration(
        original,
        graph,
        clean,
        selection,
        histograms,
        n_cal,
        time.perf_counter() - start,
        amx_convs=amx_convs,
    )
    sqnr_samples = (
        f"{held_range[1] - held_range[0]} held-out samples"
        if held_range[0] >= n_cal
        else f"{held_range[1]} calibration samples (none left to hold out)"
    ) + ("" if recipe.runtime == "onnxruntime" else f", run by {recipe.runtime}")
    result = _lower(calibration, recipe, options, held_out, fp32_outputs, sqnr_samples, {})
    kept = kept_fp32.keys() & untimed.int8
    if kept:
        result = _checked_on_whole_model(result, replace(calibration, selection=untimed), len(kept))
    result = replace(result, smoothing=smoothing)
    if options.speed_check:
        result = keep_fp32_unless_faster(result)
    if not recipe.bias_correction or result.speed_check.endswith(WHOLE_FP32):
        return result
    return _correct_biases(result, _bias_batches(source, n_cal, batch_size if fixed else None))


def _bias_batches(source: CalibrationSource, n_cal: int, fixed_batch: int | None) -> list[dict]:
    """The first calibration batches that hold BIAS_SAMPLES samples (fewer if there are fewer),
    in the model's fixed batch if it has one (one image, for a model exported at batch 1)."""
    batches, rows = [], 0
    for batch in source.batches(0, n_cal, fixed_batch or BIAS_SAMPLES):
        batches.append(batch)
        rows += _rows(batch)
        if rows >= BIAS_SAMPLES:
            break
    return batches


def _correct_biases(result: QuantizeResult, batches: list[dict]) -> QuantizeResult:
    """`result` with its INT8 Convs' biases corrected on `batches`, if that raises the worst
    output's SQNR on the held-out samples; else `result`, saying what was measured."""
    int8 = {d.name for d in result.decisions if d.precision == "int8"}
    convs = bias_correction.correctable(result.calibration.graph, int8)
    if not convs:
        return replace(result, bias_correction="no INT8 Conv with a bias")

    def with_shifts(shifts: dict) -> QuantizeResult:
        calibration = replace(result.calibration, bias_shifts=shifts, bias_batches=batches)
        return replace(result, calibration=calibration)

    shifts = bias_correction.bias_shifts(
        convs,
        result.fp32_model,
        lambda so_far: qdq_model(with_shifts(so_far), set()),
        batches,
        result.options.threads,
    )
    corrected = keep_fp32(with_shifts(shifts), {})
    before, after = min(result.output_sqnr_db.values()), min(corrected.output_sqnr_db.values())
    measured = (
        f"output SQNR {before:.1f} dB -> {after:.1f} dB with {len(convs)} Conv biases corrected"
    )
    if after > before:  # the same nodes in INT8: the speed check's measure still holds
        return replace(
            corrected, bias_correction=f"{measured}: kept", speed_check=result.speed_check
        )
    return replace(result, bias_correction=f"{measured}: not kept")


def keep_fp32(result: QuantizeResult, fallback: dict[str, str]) -> QuantizeResult:
    """The same calibration lowered again with the `fallback` nodes (name -> why) in FP32."""
    return replace(_relower(result, result.recipe, fallback), weight_choice=result.weight_choice)


def keep_fp32_unless_faster(
    result: QuantizeResult, seconds: float = CHECK_SECONDS
) -> QuantizeResult:
    """The whole model back in FP32 unless, on this CPU, the INT8 model saves at least
    WIN_MARGIN of the FP32 graph's time at the batch it will be served at (`served_feeds`).
    Per-node kernel timings cannot see what a whole small model pays for its Q/DQ conversions,
    and an INT8 model that buys no speed only costs accuracy. A shortfall under
    `kernel_timing.MIN_GAIN_MS` a batch is below timing resolution and keeps INT8. A first timing
    that does not show INT8 CLOSE_CALL faster is a close call: a timing twice as long decides it,
    unless it shows INT8 CLEAR_LOSS slower.
    Only for this machine's own target, with timing on; once only for one set of INT8 nodes
    (a lowering again, as a fallback makes, starts UNMEASURED)."""
    if result.speed_check != UNMEASURED:
        return result
    if not timed_here(result.recipe):
        return replace(result, speed_check="not measured: not this CPU's target, or timing off")
    models = {"fp32": result.fp32_model, "int8": result.model}
    fp32_ms, int8_ms = latencies_ms(result, models, seconds).values()
    if _short_of_margin(fp32_ms, int8_ms, CLOSE_CALL) and int8_ms < fp32_ms * (1 + CLEAR_LOSS):
        fp32_ms, int8_ms = latencies_ms(result, models, 2 * seconds).values()
    measured = (
        f"INT8 {fp32_ms / int8_ms:.2f}x the FP32 graph's speed "
        f"({int8_ms:.2f} ms vs {fp32_ms:.2f} ms a batch of {_rows(result.served_feeds)}) "
        f"on {result.recipe.target} in {result.recipe.runtime}"
    )
    if not _short_of_margin(fp32_ms, int8_ms):
        return replace(result, speed_check=f"{measured}: INT8 kept")
    reason = (
        f"the INT8 model was not {WIN_MARGIN:.0%} faster than FP32 here ({measured}): {WHOLE_FP32}"
    )
    int8_nodes = [d.name for d in result.decisions if d.precision == "int8"]
    whole_fp32 = keep_fp32(result, dict.fromkeys(int8_nodes, reason))
    return replace(
        whole_fp32,
        speed_check=reason,
        bias_correction=f"none: {WHOLE_FP32}",
        group_cost=result.group_cost,
    )


def _short_of_margin(fp32_ms: float, int8_ms: float, margin: float = WIN_MARGIN) -> bool:
    return int8_ms - fp32_ms * (1 - margin) >= kernel_timing.MIN_GAIN_MS


def timed_here(recipe: Recipe) -> bool:
    """May timings on this machine decide for a model of `recipe`: made for this CPU, with
    timing on."""
    return recipe.kernel_timing and recipe.target == host_target()


def latencies_ms(
    result: QuantizeResult, models: dict[str, onnx.ModelProto], seconds: float
) -> dict[str, float]:
    """Median ms a served batch (`served_feeds`) of each model, in `models`' order, timed in
    interleaved rounds in the recipe's runtime."""
    speed = bench.compare_sessions(
        models,
        result.served_feeds,
        result.options.threads,
        min_seconds=seconds,
        rounds=3,
        min_block=1,
        runtime=result.recipe.runtime,
    )
    return {name: speed[name]["latency_ms_p50"] for name in models}


def with_weights(result: QuantizeResult, weights: str) -> QuantizeResult:
    """The same calibration lowered again with another weight format, the same nodes in FP32.
    A bias shift is the mean error of the weights it was measured with: where `result` kept its
    bias corrections, they are measured again for `weights`."""
    fp32 = {
        d.name: d.reason
        for d in result.decisions
        if d.precision == "fp32" and d.name in result.calibration.selection.int8
    }
    calibration = result.calibration
    unshifted = replace(result, calibration=replace(calibration, bias_shifts={}))
    lowered = _relower(unshifted, replace(result.recipe, weights=weights), fp32)
    if not calibration.bias_shifts:
        return lowered
    return _correct_biases(lowered, calibration.bias_batches)


def _relower(result: QuantizeResult, recipe: Recipe, fallback: dict[str, str]) -> QuantizeResult:
    """`result`'s calibration lowered again under `recipe`, the `fallback` nodes in FP32; the
    calibration carries the bias shifts and the selection, so what bias correction and the
    whole-model check of kernel timing measured still holds."""
    lowered = _lower(
        result.calibration,
        recipe,
        result.options,
        result.held_out,
        result.fp32_outputs,
        result.sqnr_samples,
        fallback,
    )
    return replace(
        lowered,
        bias_correction=result.bias_correction,
        smoothing=result.smoothing,
        timing_check=result.timing_check,
    )


def _rows(feeds: dict) -> int:
    return len(next(iter(feeds.values())))


def served(feeds: dict[str, np.ndarray], rows: int | None) -> dict[str, np.ndarray]:
    """`feeds` as a batch of `rows` samples (None: as it is): cut short, or its samples repeated
    in turn. Inputs without that batch dimension are passed as they are."""
    have = _rows(feeds)
    if rows is None or rows == have:
        return feeds
    take = np.arange(rows) % have
    return {
        name: np.take(a, take, axis=0) if a.ndim and len(a) == have else a
        for name, a in feeds.items()
    }


def qdq_model(result: QuantizeResult, fp32_nodes: set[str]) -> onnx.ModelProto:
    """The Q/DQ model with `fp32_nodes` in FP32, without the coverage and ONNX checks: a quick
    trial. Stamped as the result is, so that ONNX Runtime runs it exact where its weights would
    saturate this CPU's kernels (`runtime.session`)."""
    calibration = result.calibration
    tried = dict.fromkeys(fp32_nodes, "tried in FP32")
    int8 = set(sent_back(calibration.graph, calibration.selection, tried).int8)
    plan = make_plan(
        calibration.graph, int8, calibration.histograms, result.recipe, calibration.amx_convs
    )
    trial = _lowered(calibration.graph, plan, calibration.bias_shifts, checked=False)
    _stamp(trial, calibration.original, result.recipe)
    return trial


def _lowered(
    graph: ir.Model, plan: QuantPlan, bias_shifts: dict, checked: bool = True
) -> onnx.ModelProto:
    """`graph` lowered to Q/DQ by `plan`, the bias shifts applied to the Convs it keeps INT8."""
    shifted = bias_correction.shifted(graph, bias_shifts, plan.nodes)
    return _for_ort(passes.lower_to_qdq(shifted, plan, checked))


def _lower(
    calibration: Calibration,
    recipe: Recipe,
    options: RunOptions,
    held_out: list[dict],
    fp32_outputs: Reference,
    sqnr_samples: str,
    fallback: dict[str, str],
) -> QuantizeResult:
    clean, graph = calibration.clean, calibration.graph
    selection = sent_back(graph, calibration.selection, fallback)
    int8, plan, executed, selection = _lower_without_islands(
        graph,
        selection,
        calibration.histograms,
        recipe,
        calibration.bias_shifts,
        calibration.amx_convs,
    )
    _stamp(int8, calibration.original, recipe)
    folded = {mul.name for mul in idle_scaling_muls(graph, plan.nodes)}  # back into FP32 weights
    return QuantizeResult(
        model=int8,
        fp32_model=clean,
        recipe=recipe,
        options=options,
        decisions=[
            d
            for d in decisions(graph, selection, plan.absorbed, plan.amx_convs)
            if d.name not in folded
        ],
        kernels=coverage.kernel_counts(executed),
        calibration_samples=calibration.samples,
        calibration_seconds=calibration.seconds,
        output_sqnr_db=sqnr_against(fp32_outputs, int8, held_out, options.threads, recipe.runtime),
        sqnr_samples=sqnr_samples,
        floors=plan.floors,
        held_out=held_out,
        fp32_outputs=fp32_outputs,
        calibration=calibration,
    )


FLOAT_ISLAND = "ORT ran it in float between Q/DQ (no fusion for this pattern), so it stays FP32"
NCHW_MAXPOOL = "ORT ran it on uint8 in its NCHW MaxPool kernel, slower than in float: it stays FP32"


def _lower_without_islands(
    graph: ir.Model,
    selection: Selection,
    histograms: dict,
    recipe: Recipe,
    bias_shifts: dict,
    amx_convs: frozenset[str] = frozenset(),
):
    """Lower to Q/DQ (`bias_shifts` taken from the Convs' biases, the `amx_convs` on AMX tiles),
    then send every planned node ORT would still run in float, or (for ONNX Runtime) on uint8 in
    a kernel slower than float, back to FP32, until none is left. Returns the INT8 model, its
    plan, ORT's executed graph, and the selection."""
    while True:  # ends: every round sends at least one planned node back to FP32
        plan = make_plan(graph, set(selection.int8), histograms, recipe, amx_convs)
        int8 = _lowered(graph, plan, bias_shifts)
        executed = coverage.optimized_graph(int8)
        found = dict.fromkeys(coverage.float_islands(executed, plan.nodes), FLOAT_ISLAND)
        if recipe.runtime == "onnxruntime":
            found |= dict.fromkeys(coverage.nchw_uint8_maxpools(executed, plan.nodes), NCHW_MAXPOOL)
        if not found:
            return int8, plan, executed, selection
        selection = sent_back(graph, selection, found)


def _slower_in_int8(
    clean: onnx.ModelProto,
    graph: ir.Model,
    nodes: set[str],
    feeds: dict,
    recipe: Recipe,
    threads: int,
    amx_convs: frozenset[str],
) -> dict[str, str]:
    """Kernel timings describe this machine and ONNX Runtime's kernels: they decide only for
    this machine's own target, and for a model made for ONNX Runtime."""
    if not timed_here(recipe) or recipe.runtime != "onnxruntime":
        return {}
    return kernel_timing.slower_in_int8(
        clean,
        graph,
        nodes,
        feeds,
        WEIGHT_FORMATS[recipe.weights],
        recipe.target,
        threads,
        amx_convs,
    )


def _faster_on_amx_tiles(
    clean: onnx.ModelProto,
    graph: ir.Model,
    nodes: set[str],
    feeds: dict,
    recipe: Recipe,
    options: RunOptions,
) -> frozenset[str]:
    """The Convs that go on AMX tiles: measured, so only on this machine's own target, amx, with
    timing on, for ONNX Runtime."""
    if not timed_here(recipe) or recipe.runtime != "onnxruntime" or recipe.target != "amx":
        return frozenset()
    weights = WEIGHT_FORMATS[recipe.weights]
    return frozenset(
        kernel_timing.faster_on_amx_tiles(clean, graph, nodes, feeds, weights, options.threads)
    )


def _select(
    graph: ir.Model, recipe: Recipe, kept_fp32: dict | None = None, scaling: dict | None = None
) -> Selection:
    """The recipe's INT8 candidates in `graph`, but the `kept_fp32` nodes and SmoothQuant's
    `scaling` Muls (name -> why they stay FP32)."""
    kept = {
        **outside_convs(graph, recipe.overrides.fp32_outside_convs),
        **ort_only(graph, recipe.runtime),
        **(kept_fp32 or {}),
    }
    selected = select_nodes(graph, recipe.overrides.fp32, recipe.activation_matmuls, kept)
    return sent_back(graph, selected, scaling or {})


def _calibrated_selections(
    graph: ir.Model,
    clean: onnx.ModelProto,
    recipe: Recipe,
    kept_fp32: dict[str, str],
    scaling: dict[str, str],
    samples: CalibrationSamples,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> tuple[Selection, Selection, dict]:
    """The INT8 selection of `graph` (`clean` is its protobuf) without the `kept_fp32` nodes and
    with them, and the histograms of both's activations over the calibration samples. Nodes
    whose tensors no uint8 scale can hold leave both, and the nodes are selected again, so that
    no data movement is left feeding them uint8."""

    def selections(kept: dict[str, str]) -> tuple[Selection, Selection]:
        timed = _select(graph, recipe, {**kept_fp32, **kept}, scaling)
        return timed, _select(graph, recipe, kept, scaling) if kept_fp32 else timed

    timed, untimed = selections({})
    tensors = observed_tensors(graph, timed.int8 | untimed.int8)
    histograms = samples.histograms(clean, tensors, progress)
    beyond = _beyond_uint8(graph, untimed.int8, histograms)
    if beyond:
        timed, untimed = selections(beyond)
    return timed, untimed, histograms


def _checked_on_whole_model(
    result: QuantizeResult, untimed: Calibration, kept: int
) -> QuantizeResult:
    """`result`, in which kernel timing kept `kept` nodes FP32, or the same calibration with
    those nodes INT8 (`untimed`) if that whole model runs CONFIRM_MARGIN faster here. One-node models
    misjudge in both directions: ORT wraps a lone QLinearConv in NHWC Transposes that cancel
    between INT8 neighbours in the whole model, and an FP32 node between INT8 ones pays a
    dequantize, a quantize and layout reorders there that its one-node model does not."""
    int8 = _relower(replace(result, calibration=untimed), result.recipe, {})
    ms = latencies_ms(result, {"kept": result.model, "int8": int8.model}, CHECK_SECONDS)
    measured = (
        f"checked on the whole model: {ms['kept']:.2f} ms a batch as kernel timing chose ({kept} "
        f"kept FP32), {ms['int8']:.2f} ms with INT8 there too"
    )
    saved_ms = ms["kept"] - ms["int8"]
    if saved_ms >= max(CONFIRM_MARGIN * ms["kept"], kernel_timing.MIN_GAIN_MS):
        return replace(int8, timing_check=f"{measured}: INT8 taken")
    return replace(result, timing_check=f"{measured}: kept FP32")


def _beyond_uint8(graph: ir.Model, nodes: set[str], histograms: dict) -> dict[str, str]:
    """Chosen nodes that read or write a tensor no uint8 scale can hold (an attention mask's
    finfo.min, log(0)): they stay FP32."""
    kept = {}
    for node in graph.graph:
        hist = (
            next(
                (
                    histograms[v.name]
                    for v in [*node.inputs, *node.outputs]
                    if v is not None and v.name in histograms and histograms[v.name].beyond
                ),
                None,
            )
            if node.name in nodes
            else None
        )
        if hist is not None:
            kept[node.name] = (
                f"a tensor it reads or writes holds values no uint8 scale can cover ({hist.beyond} non-finite or "
                f"beyond +-{BEYOND_LIMIT:g}; range {hist.min:.3g} to {hist.max:.3g}), e.g. an attention mask's finfo.min"
            )
    return kept


def _smoothed_inputs_absmax(
    clean: onnx.ModelProto, graph: ir.Model, nodes: set[str], samples: CalibrationSamples
) -> dict:
    """Each channel's largest magnitude, over the calibration samples, of every input that INT8
    weight GEMMs among `nodes` read: what SmoothQuant balances against their weights."""
    inputs = list(
        {
            n.inputs[0].name: None
            for n in graph.graph
            if n.name in nodes and n in weight_gemm_readers(n.inputs[0])
        }
    )
    return samples.channel_absmax(clean, inputs)


def _smooth(graph: ir.Model, absmax: dict, alpha: float) -> dict[str, str]:
    """Move activation outliers of `graph` into the weights of the GEMMs that read them, in
    place; returns the scaling Muls it needed (name -> why they stay FP32)."""
    passes.SmoothActivationsPass(smoothing_scales(graph, absmax, alpha))(graph)
    return dict.fromkeys(scaling_muls(graph), "SmoothQuant's scaling of its input, FP32 by design")


def _alpha(
    recipe: Recipe,
    graph: ir.Model,
    absmax: dict,
    samples: CalibrationSamples,
    held_out: list[dict],
    fp32_outputs: Reference,
) -> tuple[float, str]:
    """The recipe's SmoothQuant alpha, or where it leaves a choice, the one whose model (every
    candidate node INT8, calibrated afresh) has the best worst-output SQNR on the held-out
    samples against `fp32_outputs`; with what was measured."""
    alphas = recipe.smoothing.alphas(recipe.weights)
    if len(alphas) == 1:
        return alphas[0], f"alpha {alphas[0]:g}"
    if not smoothing_scales(graph, absmax, AUTO_ALPHA):  # which tensors: the same for any alpha
        return AUTO_ALPHA, f"alpha {AUTO_ALPHA:g} (no outlier channels: nothing to choose)"
    scores = {}
    for alpha in alphas:
        smoothed = graph.clone()
        scaling = _smooth(smoothed, absmax, alpha)
        selection, _, histograms = _calibrated_selections(
            smoothed, _for_ort(smoothed), recipe, {}, scaling, samples
        )
        int8 = _lower_without_islands(smoothed, selection, histograms, recipe, {})[0]
        sqnr = sqnr_against(fp32_outputs, int8, held_out, samples.threads, recipe.runtime)
        scores[alpha] = min(sqnr.values())
    best = max(scores, key=scores.get)
    measured = ", ".join(f"{a:g}: {db:.1f} dB" for a, db in scores.items())
    return (
        best,
        f"alpha {best:g}, the best held-out output SQNR with {recipe.weights} weights ({measured})",
    )


def cleaned_fp32(model_path) -> onnx.ModelProto:
    """The FP32 graph INT8 for ONNX Runtime starts from: the model after quantize's clean-up
    passes (the fair FP32 baseline to time INT8 against)."""
    return _for_ort(passes.cleanup(load_model(model_path)))


def _for_ort(model: ir.Model) -> onnx.ModelProto:
    """The protobuf form, where ONNX Runtime or the caller takes the model."""
    return ir.serde.serialize_model(model)


def input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    initializers = {i.name for i in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        # Paddle2ONNX writes an unknown dimension as dim_value -1
        shape = tuple(d.dim_value if d.dim_value > 0 else None for d in tensor.shape.dim)
        specs.append(
            InputSpec(
                value.name, shape, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
            )
        )
    return specs


def observed_tensors(graph: ir.Model, nodes: set[str]) -> list[str]:
    """The float activations the plan may quantize: inputs and outputs of candidate nodes
    (but those a dynamic kernel quantizes itself), and the outputs of Relus and Clips from 0
    after them (their range replaces the activation)."""
    names: dict[str, None] = {}
    for node in graph.graph:
        if not on_uint8(node, nodes):
            continue
        for value in [*node.inputs, *node.outputs]:
            if is_float(value) and value.const_value is None:
                names[value.name] = None
        for user, _ in node.outputs[0].uses():
            if clamps_at_zero(user):
                names[user.outputs[0].name] = None
    return list(names)


def _batch_size(inputs: list[InputSpec], options: RunOptions, model_path) -> tuple[int, bool]:
    """The configured batch, or the model's own if its batch dimension is fixed."""
    fixed = {s.shape[0] for s in inputs if s.shape and s.shape[0] is not None}
    if len(fixed) > 1:
        raise InputError(model_path, f"inputs have different fixed batch sizes {sorted(fixed)}")
    if not fixed:
        return options.batch_size, False
    batch = fixed.pop()
    if options.serve_batch not in (None, batch):
        raise InputError(
            model_path,
            f"its batch is fixed at {batch}: it cannot be served at {options.serve_batch}",
        )
    return batch, True


def _split(
    total: int, options: RunOptions, multiple: int, calib_path
) -> tuple[int, tuple[int, int]]:
    """Calibration sample count and the [start, stop) window used to measure SQNR, in whole
    multiples of a fixed model batch."""
    whole = total - total % multiple
    if whole == 0:
        raise InputError(
            calib_path, f"{total} samples, fewer than the model's fixed batch of {multiple}"
        )
    n_cal = max(multiple, min(options.calib_samples, whole) // multiple * multiple)
    held = max(multiple, options.held_out_samples // multiple * multiple)
    if whole > n_cal:
        return n_cal, (n_cal, min(whole, n_cal + held))
    spare = min(held, whole // 5 // multiple * multiple)
    if spare:
        return whole - spare, (whole - spare, whole)
    return n_cal, (0, min(whole, held))


def _outputs(model: onnx.ModelProto, batch: dict, model_path) -> list[np.ndarray]:
    """The model's outputs on `batch`; InputError if ONNX Runtime cannot run it."""
    try:
        return session(model).run(None, batch)
    except Exception as exc:  # ORT's own error types for a model it rejects
        raise InputError(
            model_path, f"ONNX Runtime cannot run the model: {str(exc).splitlines()[0]}"
        ) from None


def _check_cleanup(ref: list[np.ndarray], clean: onnx.ModelProto, batch: dict) -> None:
    """The FP32 clean-up must not change what the model computes (`ref`: the outputs as loaded)."""
    got = session(clean).run(None, batch)
    for r, g in zip(ref, got):
        if r.dtype.kind == "f" and not np.allclose(
            r, g, rtol=1e-3, atol=1e-4 * (np.abs(r).max() + 1e-6)
        ):
            raise RuntimeError(
                "internal error: FP32 clean-up changed the model's outputs; please report this model"
            )


def _check_float32(model: ir.Model, model_path) -> None:
    """A half-precision model has no float32 weight to quantize: say so rather than return it unchanged."""
    weights = {v.const_value.dtype for v in model.graph.initializers.values() if v.const_value}
    half = {ir.DataType.FLOAT16: "float16", ir.DataType.BFLOAT16: "bfloat16"}
    kinds = " and ".join(name for dtype, name in half.items() if dtype in weights)
    if kinds and ir.DataType.FLOAT not in weights:
        raise InputError(
            model_path,
            f"the model computes in {kinds}: INT8 quantization starts from a float32 model; convert its "
            f"{kinds} tensors to float32 first",
        )


def _check_refined_convs(graph: ir.Model, nodes: set[str], recipe: Recipe, model_path) -> None:
    """The Convs named by `wide_outputs` and `residual_inputs` overrides must exist, and only FP32 ops may
    read their outputs (both add a second INT8 result to them in float)."""
    convs = {node.name: node for node in graph.graph if node.op_type == "Conv"}
    for option in ("wide_outputs", "residual_inputs"):
        for name in getattr(recipe.overrides, option):
            if name not in convs:
                raise InputError(
                    model_path, f"{option} names {name!r}, which is not a Conv of the model"
                )
            readers = [user.name for user, _ in convs[name].outputs[0].uses() if user.name in nodes]
            if readers:
                raise InputError(
                    model_path,
                    f"the output of {name!r} is read by INT8 {readers}: exclude them to use {option}",
                )


def _recipe_preprocess(model: ir.Model) -> ImagePreprocess | None:
    recipe = model.metadata_props.get(PREPROCESS_KEY)
    return ImagePreprocess.from_recipe(json.loads(recipe)) if recipe else None


def _stamp(int8: onnx.ModelProto, original: ir.Model, recipe: Recipe) -> None:
    kept = dict(original.metadata_props)
    kept[RECIPE_KEY] = json.dumps(recipe.to_dict())
    kept[TARGET_KEY] = recipe.target
    kept[WEIGHTS_KEY] = recipe.weights
    kept["quantize.version"] = __version__
    del int8.metadata_props[:]
    for key, value in kept.items():
        int8.metadata_props.add(key=key, value=value)
    int8.producer_name, int8.producer_version = "quantize", __version__
