"""A quantization plan: which nodes run in INT8 and the range of every quantized tensor.

The plan is made from the cleaned FP32 graph and the calibration histograms; the passes
(`AbsorbActivationPass`, `InsertQDQPass`) only carry it out.
"""

from dataclasses import dataclass, field

import onnx_ir as ir

from calibration import StreamingHistogram, choose_range
from quantize.passes.rewrite import read_once
from quantize.policy import FLOAT_OUTPUT_FUSIONS, RULES, clamps_at_zero, on_uint8
from quantize.reader_ranges import narrowed_to_readers
from quantize.recipe import Recipe
from quantize.target import WEIGHT_FORMATS, WeightFormat


@dataclass
class QuantPlan:
    nodes: set[str]
    ranges: dict[str, tuple[float, float]]
    weights: WeightFormat  # the recipe's (quantize/target.py)
    runtime: str = "onnxruntime"  # the recipe's: in ORT, its integer MatMul adds the bias
    absorbed: dict[str, str] = field(
        default_factory=dict
    )  # Relu or Clip node -> tensor whose uint8 clamp replaces it
    wide: set[str] = field(
        default_factory=set
    )  # Convs whose output is requantized at two scales (passes/widen_output.py)
    residual: set[str] = field(
        default_factory=set
    )  # Convs whose input's rounding residual gets its own Conv (passes/residual_input.py)
    # tensor -> where its range is clipped below for its readers, which cannot tell the values
    # under it apart (a SiLU's flat tail, an absorbed Relu's zero): their FP32 reference too
    floors: dict[str, float] = field(default_factory=dict)
    # Convs whose int8 weights are stored for ORT's GEMM path, on AMX tiles (passes/amx_conv_weights.py)
    amx_convs: set[str] = field(default_factory=set)


def make_plan(
    model: ir.Model,
    nodes: set[str],
    histograms: dict[str, StreamingHistogram],
    recipe: Recipe,
    amx_convs: frozenset[str] = frozenset(),
) -> QuantPlan:
    """The plan for `nodes` under `recipe` (resolved: no "auto" in it); the `amx_convs` that
    kernel timing found faster on AMX tiles go there, in ONNX Runtime."""
    ranges = {
        name: choose_range(h, recipe.ranges)
        for name, h in histograms.items()
        if h.total and not h.beyond
    }
    narrowed = narrowed_to_readers(model, nodes, ranges)
    plan = QuantPlan(
        set(nodes),
        narrowed,
        WEIGHT_FORMATS[recipe.weights],
        recipe.runtime,
        wide=set(recipe.overrides.wide_outputs) & set(nodes),
        residual=set(recipe.overrides.residual_inputs) & set(nodes),
        floors={name: lo for name, (lo, _) in narrowed.items() if lo > ranges[name][0]},
        amx_convs=set(amx_convs) & set(nodes)
        if recipe.runtime == "onnxruntime" and WEIGHT_FORMATS[recipe.weights].zero_point == 0
        else set(),
    )
    alias: dict[str, str] = {}
    for node in model.graph:
        if _absorbable(node, plan.nodes):
            source, result = node.inputs[0].name, node.outputs[0].name
            plan.ranges[source] = (0.0, plan.ranges[result][1])
            plan.absorbed[node.name] = source
            plan.floors[source] = 0.0
            alias[result] = source
    for node in model.graph:
        if node.name not in plan.nodes:
            continue
        if RULES[node.op_type].same_range:
            source = alias.get(node.inputs[0].name, node.inputs[0].name)
            if source in plan.ranges:
                for out in node.outputs:  # a Split's every part
                    plan.ranges[out.name] = plan.ranges[source]
        elif (
            node.op_type == "Concat"
        ):  # of parts at one range (a Conv3D's windows): no requantization
            parts = {plan.ranges.get(alias.get(v.name, v.name)) for v in node.inputs}
            if len(parts) == 1 and None not in parts:
                plan.ranges[node.outputs[0].name] = parts.pop()
            else:
                _parts_read_only_here_take_its_range(node, plan)
    return plan


def _parts_read_only_here_take_its_range(concat: ir.Node, plan: QuantPlan) -> None:
    """A Concat's part that nothing else reads is quantized at the Concat's own range: ORT's
    QLinearConcat then copies it instead of requantizing it through a table (single-threaded),
    and its values are rounded once, not twice. Not a part the plan clips for a reader (an
    absorbed Relu's source among them), nor one whose range its producer does not set."""
    result = plan.ranges.get(concat.outputs[0].name)
    if result is None:
        return
    for part in concat.inputs:
        producer = part.producer()
        if (
            read_once(part)
            and part.name in plan.ranges
            and part.name not in plan.floors
            and producer is not None
            and producer.name in plan.nodes
            and not RULES[producer.op_type].same_range
            and producer.name not in plan.wide
        ):
            plan.ranges[part.name] = result


def _absorbable(node: ir.Node, nodes: set[str]) -> bool:
    """A Relu or Clip from 0 after a quantized op, alone on that op's output: a zero point of 0
    clamps it, if the output is quantized at all (a GEMM's output stays float when no INT8 op
    reads it)."""
    if not clamps_at_zero(node) or node.outputs[0].is_graph_output():
        return False
    source = node.inputs[0]
    producer = source.producer()
    if not on_uint8(producer, nodes) or RULES[producer.op_type].same_range:
        return False  # a data-movement op shares its input's range, which need not start at 0
    if producer.op_type in FLOAT_OUTPUT_FUSIONS and not any(
        user.name in nodes and index in RULES[user.op_type].activations
        for user, index in node.outputs[0].uses()
    ):
        return False
    return len(source.uses()) == 1 and not source.is_graph_output()
