"""`quantize_(model, calib, config)`: the one entry point from an FP32 model to an INT8 one.

    frontend.load_model -> passes.cleanup -> calibration -> policy + plan
      -> passes.lower_to_qdq -> coverage check in ORT's optimized graph (drop float islands)
"""

import json
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import onnx
import onnx_ir as ir

from calibration import ImagePreprocess, InputSpec, collect_channel_absmax, collect_histograms, open_calibration
from calibration.histogram import BEYOND_LIMIT
from quantize import coverage, kernel_timing, passes
from quantize.config import QuantConfig
from quantize.errors import QuantizeError
from quantize.frontend import load_model
from quantize.passes.smooth_activations import smoothing_scales, weight_gemm_readers
from quantize.plan import QuantPlan, make_plan
from quantize.policy import ABSORBABLE_ACTIVATIONS, RULES, is_float, select_nodes
from quantize.runtime import session
from quantize.target import TARGET_KEY, host_target, resolve, weight_qmax
from quantize.validate import layer_sqnr, output_sqnr

__version__ = "0.1.0"
PREPROCESS_KEY = "quantize.preprocess"


@dataclass
class NodeDecision:
    name: str
    op_type: str
    precision: str  # "int8" or "fp32"
    reason: str = ""


@dataclass(frozen=True)
class Calibration:
    """What lowering needs and is cheap to keep: the models, the INT8 candidates and the
    activation histograms (fixed size), so a result can be lowered again without recalibrating."""
    original: onnx.ModelProto
    clean: onnx.ModelProto
    nodes: frozenset[str]
    kept_fp32: dict[str, str]  # nodes the policy chose that measurements sent back to FP32, with why
    histograms: dict
    samples: int
    seconds: float


@dataclass
class QuantizeResult:
    model: onnx.ModelProto
    fp32_model: onnx.ModelProto
    config: QuantConfig
    decisions: list[NodeDecision]
    kernels: dict
    calibration_samples: int
    calibration_seconds: float
    output_sqnr_db: dict[str, float]
    layer_sqnr_db: dict[str, float]
    sqnr_samples: str
    held_out: list[dict] = field(repr=False)
    calibration: Calibration = field(repr=False)


def quantize_(model_path, calib, config: QuantConfig = QuantConfig(), image_preprocess: ImagePreprocess | None = None,
              progress: Callable[[int, int], None] = lambda done, total: None) -> QuantizeResult:
    config = replace(config, target=resolve(config.target))
    original = load_model(model_path)
    _check_float32(original, model_path)
    clean = ir.serde.serialize_model(passes.cleanup(ir.serde.deserialize_model(original)))
    inputs = input_specs(clean)
    source = open_calibration(calib, inputs, image_preprocess or _recipe_preprocess(original))
    batch_size, fixed = _batch_size(inputs, config, model_path)
    n_cal, held_range = _split(source.num_samples, config, batch_size if fixed else 1, source.path)
    held_out = list(source.batches(*held_range, batch_size))
    _check_cleanup(original, clean, held_out[0], model_path)

    graph = ir.serde.deserialize_model(clean)
    nodes = select_nodes(graph, config.exclude, config.activation_matmuls)
    _check_refined_convs(graph, nodes, config, model_path)
    start = time.perf_counter()
    scaling_muls: set[str] = set()
    if config.smooth_alpha is not None:
        clean, scaling_muls = _smoothed(clean, graph, nodes, source, n_cal, batch_size, config)
        _check_cleanup(original, clean, held_out[0], model_path)
        graph = ir.serde.deserialize_model(clean)
        nodes = select_nodes(graph, config.exclude, config.activation_matmuls) - scaling_muls
    kept_fp32 = _slower_in_int8(clean, graph, nodes, held_out[0], config)
    if kept_fp32:  # selected again, so that no data movement is left feeding them uint8
        nodes = select_nodes(graph, (*config.exclude, *kept_fp32), config.activation_matmuls) - scaling_muls
    histograms = collect_histograms(clean, observed_tensors(graph, nodes), source, n_cal, batch_size, config.threads, progress)
    beyond = _beyond_uint8(graph, nodes, histograms)
    if beyond:
        kept_fp32.update(beyond)
        nodes = select_nodes(graph, (*config.exclude, *kept_fp32), config.activation_matmuls) - scaling_muls
    calibration = Calibration(original, clean, frozenset(nodes), kept_fp32, histograms, n_cal, time.perf_counter() - start)
    sqnr_samples = f"{held_range[1] - held_range[0]} held-out samples" if held_range[0] >= n_cal else f"{held_range[1]} calibration samples (none left to hold out)"
    return _lower(calibration, config, held_out, sqnr_samples, {})


def keep_fp32(result: QuantizeResult, fallback: dict[str, str]) -> QuantizeResult:
    """The same calibration lowered again with the `fallback` nodes (name -> why) in FP32."""
    return _lower(result.calibration, result.config, result.held_out, result.sqnr_samples, fallback)


def qdq_model(result: QuantizeResult, fp32_nodes: set[str]) -> onnx.ModelProto:
    """The Q/DQ model with `fp32_nodes` in FP32, without the coverage check: a quick trial."""
    graph = ir.serde.deserialize_model(result.calibration.clean)
    config = result.config
    plan = make_plan(graph, set(result.calibration.nodes) - fp32_nodes, result.calibration.histograms, config)
    return ir.serde.serialize_model(passes.lower_to_qdq(graph, plan))


def _lower(calibration: Calibration, config: QuantConfig, held_out: list[dict], sqnr_samples: str,
           fallback: dict[str, str]) -> QuantizeResult:
    clean, graph = calibration.clean, ir.serde.deserialize_model(calibration.clean)
    int8, plan, executed, islands = _lower_without_islands(clean, graph, set(calibration.nodes) - set(fallback), calibration.histograms, config)
    _stamp(int8, calibration.original, config)
    return QuantizeResult(
        model=int8,
        fp32_model=clean,
        config=config,
        decisions=_decisions(graph, plan, {**calibration.kept_fp32, **islands, **fallback}, config.exclude),
        kernels=coverage.kernel_counts(executed),
        calibration_samples=calibration.samples,
        calibration_seconds=calibration.seconds,
        output_sqnr_db=output_sqnr(clean, int8, held_out, config.threads),
        layer_sqnr_db=layer_sqnr(clean, int8, set(plan.absorbed.values()), held_out[0], config.threads),
        sqnr_samples=sqnr_samples,
        held_out=held_out,
        calibration=calibration,
    )


def _lower_without_islands(clean: onnx.ModelProto, graph: ir.Model, nodes: set[str], histograms: dict, config: QuantConfig):
    """Lower to Q/DQ, then drop every planned node ORT would still run in float, until none is
    left. Returns the INT8 model, its plan, ORT's executed graph, and the dropped nodes."""
    islands: dict[str, str] = {}
    while True:  # ends: every round sends at least one planned node back to FP32
        plan = make_plan(graph, nodes, histograms, config)
        int8 = ir.serde.serialize_model(passes.lower_to_qdq(ir.serde.deserialize_model(clean), plan))
        executed = coverage.optimized_graph(int8)
        found = coverage.float_islands(executed, plan.nodes)
        if not found:
            return int8, plan, executed, islands
        islands.update({name: "ORT ran it in float between Q/DQ (no fusion for this pattern), so it stays FP32" for name in found})
        nodes = nodes - found


def _slower_in_int8(clean: onnx.ModelProto, graph: ir.Model, nodes: set[str], feeds: dict, config: QuantConfig) -> dict[str, str]:
    """Kernel timings describe this machine: they decide only for its own target."""
    if not config.time_kernels or config.target != host_target():
        return {}
    return kernel_timing.slower_in_int8(clean, graph, nodes, feeds, weight_qmax(config.target), config.target, config.threads)


def _beyond_uint8(graph: ir.Model, nodes: set[str], histograms: dict) -> dict[str, str]:
    """Chosen nodes that read or write a tensor no uint8 scale can hold (an attention mask's
    finfo.min, log(0)): they stay FP32."""
    kept = {}
    for node in graph.graph:
        hist = next((histograms[v.name] for v in [*node.inputs, *node.outputs] if v is not None and v.name in histograms
                     and histograms[v.name].beyond), None) if node.name in nodes else None
        if hist is not None:
            kept[node.name] = (f"a tensor it reads or writes holds values no uint8 scale can cover ({hist.beyond} non-finite or "
                               f"beyond +-{BEYOND_LIMIT:g}; range {hist.min:.3g} to {hist.max:.3g}), e.g. an attention mask's finfo.min")
    return kept


def _smoothed(clean: onnx.ModelProto, graph: ir.Model, nodes: set[str], source, n_cal: int, batch_size: int,
              config: QuantConfig) -> tuple[onnx.ModelProto, set[str]]:
    """The clean model with activation outliers moved into the weights of the GEMMs that read
    them, and the names of the scaling Muls it needed."""
    inputs = list({n.inputs[0].name: None for n in graph.graph if n.name in nodes and n in weight_gemm_readers(n.inputs[0])})
    absmax = collect_channel_absmax(clean, inputs, source, n_cal, batch_size, config.threads)
    smoothing = passes.SmoothActivationsPass(smoothing_scales(graph, absmax, config.smooth_alpha))
    return ir.serde.serialize_model(smoothing(graph).model), smoothing.inserted


def input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    initializers = {i.name for i in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
        specs.append(InputSpec(value.name, shape, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))))
    return specs


def observed_tensors(graph: ir.Model, nodes: set[str]) -> list[str]:
    """The float activations the plan may quantize: inputs and outputs of candidate nodes,
    and the outputs of Relus after them (their range replaces the Relu)."""
    names: dict[str, None] = {}
    for node in graph.graph:
        if node.name not in nodes:
            continue
        for value in [*node.inputs, *node.outputs]:
            if is_float(value) and value.const_value is None:
                names[value.name] = None
        for user, _ in node.outputs[0].uses():
            if user.op_type in ABSORBABLE_ACTIVATIONS:
                names[user.outputs[0].name] = None
    return list(names)


def _batch_size(inputs: list[InputSpec], config: QuantConfig, model_path) -> tuple[int, bool]:
    """The configured batch, or the model's own if its batch dimension is fixed."""
    fixed = {s.shape[0] for s in inputs if s.shape and s.shape[0] is not None}
    if len(fixed) > 1:
        raise QuantizeError(model_path, f"inputs have different fixed batch sizes {sorted(fixed)}")
    return (fixed.pop(), True) if fixed else (config.batch_size, False)


def _split(total: int, config: QuantConfig, multiple: int, calib_path) -> tuple[int, tuple[int, int]]:
    """Calibration sample count and the [start, stop) window used to measure SQNR, in whole
    multiples of a fixed model batch."""
    whole = total - total % multiple
    if whole == 0:
        raise QuantizeError(calib_path, f"{total} samples, fewer than the model's fixed batch of {multiple}")
    n_cal = max(multiple, min(config.calib_samples, whole) // multiple * multiple)
    held = max(multiple, config.held_out_samples // multiple * multiple)
    if whole > n_cal:
        return n_cal, (n_cal, min(whole, n_cal + held))
    spare = min(held, whole // 5 // multiple * multiple)
    if spare:
        return whole - spare, (whole - spare, whole)
    return n_cal, (0, min(whole, held))


def _check_cleanup(original: onnx.ModelProto, clean: onnx.ModelProto, batch: dict, model_path) -> None:
    """The FP32 clean-up must not change what the model computes."""
    try:
        ref = session(original).run(None, batch)
    except Exception as exc:  # ORT's own error types for a model it rejects
        raise QuantizeError(model_path, f"ONNX Runtime cannot run the model: {str(exc).splitlines()[0]}") from None
    got = session(clean).run(None, batch)
    for r, g in zip(ref, got):
        if r.dtype.kind == "f" and not np.allclose(r, g, rtol=1e-3, atol=1e-4 * (np.abs(r).max() + 1e-6)):
            raise RuntimeError("internal error: FP32 clean-up changed the model's outputs; please report this model")


def _check_float32(model: onnx.ModelProto, model_path) -> None:
    """A half-precision model has no float32 weight to quantize: say so rather than return it unchanged."""
    weights = {t.data_type for t in model.graph.initializer}
    half = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}
    kinds = " and ".join(name for dtype, name in half.items() if dtype in weights)
    if kinds and onnx.TensorProto.FLOAT not in weights:
        raise QuantizeError(model_path, f"the model computes in {kinds}: INT8 quantization starts from a float32 model; convert its "
                                        f"{kinds} tensors to float32 first")


def _check_refined_convs(graph: ir.Model, nodes: set[str], config: QuantConfig, model_path) -> None:
    """The Convs named by `wide_outputs` and `residual_inputs` must exist, and only FP32 ops may
    read their outputs (both add a second INT8 result to them in float)."""
    convs = {node.name: node for node in graph.graph if node.op_type == "Conv"}
    for option in ("wide_outputs", "residual_inputs"):
        for name in getattr(config, option):
            if name not in convs:
                raise QuantizeError(model_path, f"{option} names {name!r}, which is not a Conv of the model")
            readers = [user.name for user, _ in convs[name].outputs[0].uses() if user.name in nodes]
            if readers:
                raise QuantizeError(model_path, f"the output of {name!r} is read by INT8 {readers}: exclude them to use {option}")


def _recipe_preprocess(model: onnx.ModelProto) -> ImagePreprocess | None:
    recipe = next((p.value for p in model.metadata_props if p.key == PREPROCESS_KEY), None)
    return ImagePreprocess.from_recipe(json.loads(recipe)) if recipe else None


def _stamp(int8: onnx.ModelProto, original: onnx.ModelProto, config: QuantConfig) -> None:
    kept = {p.key: p.value for p in original.metadata_props}
    kept["quantize.recipe"] = json.dumps(config.to_dict())
    kept["quantize.calibration_method"] = config.method
    kept[TARGET_KEY] = config.target
    kept["quantize.version"] = __version__
    del int8.metadata_props[:]
    for key, value in kept.items():
        int8.metadata_props.add(key=key, value=value)
    int8.producer_name, int8.producer_version = "quantize", __version__


def _decisions(graph: ir.Model, plan: QuantPlan, islands: dict[str, str], exclude: tuple[str, ...]) -> list[NodeDecision]:
    """One line per compute node of the FP32 graph: INT8 or FP32, and why."""
    out = []
    for node in graph.graph:
        if node.name in plan.absorbed:
            out.append(NodeDecision(node.name, node.op_type, "int8", "folded into the uint8 clamp"))
        elif node.name in plan.nodes:
            out.append(NodeDecision(node.name, node.op_type, "int8"))
        elif node.name in islands:
            out.append(NodeDecision(node.name, node.op_type, "fp32", islands[node.name]))
        elif node.name in exclude or node.op_type in exclude:
            out.append(NodeDecision(node.name, node.op_type, "fp32", "excluded by the user"))
        elif node.op_type in RULES and RULES[node.op_type].same_range:
            out.append(NodeDecision(node.name, node.op_type, "fp32", "data movement outside an INT8 region"))
        elif node.op_type in RULES:
            out.append(NodeDecision(node.name, node.op_type, "fp32", "its weight is not a constant"))
        elif node.op_type in ABSORBABLE_ACTIVATIONS:
            producer = node.inputs[0].producer()
            before = "is an INT8 GEMM whose output stays float" if producer is not None and producer.name in plan.nodes else "is FP32"
            out.append(NodeDecision(node.name, node.op_type, "fp32", f"the op before it {before} (a Relu runs in INT8 only as a uint8 clamp)"))
        elif node.outputs and is_float(node.outputs[0]):
            out.append(NodeDecision(node.name, node.op_type, "fp32", "no INT8 kernel in ONNX Runtime"))
    return out
