"""Which ops go to INT8, and how: the table of what ONNX Runtime's x86 kernels can run.

Every entry names an op that ORT's QDQ fusions turn into an integer kernel (QLinearConv,
QGemm, QLinearMatMul, QLinearAdd, ...) or runs directly on uint8 (MaxPool, Reshape, ...).
The table is a starting point, not a promise: `quantize.coverage` checks ORT's optimized
graph and drops any node ORT would still run in float between DequantizeLinear and
QuantizeLinear, which is slower than plain FP32.
"""

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir


@dataclass(frozen=True)
class OpRule:
    activations: tuple[int, ...] = (0,)  # inputs quantized per tensor (uint8)
    weight: int | None = None  # constant input quantized per channel (int8 symmetric)
    bias: int | None = None  # constant input quantized to int32 at scale s_in * s_w
    same_range: bool = False  # data movement: output keeps the input's scale and zero point
    constant_operands: bool = False  # constant activation inputs (a bias Add) become uint8 tensors
    between_int8: bool = False  # only with INT8 before and after: alone it costs a Q/DQ pair
    divisor: int | None = None  # constant input it divides by: lowered to a Mul by its reciprocal
    # float in and out, int8 weights: ORT quantizes its input on each call, inside the kernel
    dynamic: bool = False

    @property
    def weighted(self) -> bool:
        """Does it run on quantized weights?"""
        return self.weight is not None or self.dynamic


RULES: dict[str, OpRule] = {
    "Conv": OpRule(weight=1, bias=2),
    "Gemm": OpRule(weight=1, bias=2),
    "MatMul": OpRule(activations=(0, 1), weight=1),
    "Add": OpRule(activations=(0, 1), constant_operands=True),
    "Mul": OpRule(activations=(0, 1), constant_operands=True),
    "Div": OpRule(divisor=1),  # QLinearMul by 1/c (passes/div_to_mul.py)
    "Concat": OpRule(activations=tuple(range(64))),
    "GlobalAveragePool": OpRule(),
    "AveragePool": OpRule(),
    "Sigmoid": OpRule(),
    "Softmax": OpRule(between_int8=True),
    "HardSwish": OpRule(between_int8=True),  # as QLinearAdd and QLinearMul (hard_swish_to_qlinear)
    "LeakyRelu": OpRule(),
    "MaxPool": OpRule(same_range=True),
    "Resize": OpRule(same_range=True),
    "Reshape": OpRule(same_range=True),
    "Transpose": OpRule(same_range=True),
    "Flatten": OpRule(same_range=True),
    "Squeeze": OpRule(same_range=True),
    "Unsqueeze": OpRule(same_range=True),
    "Slice": OpRule(same_range=True),
    "Split": OpRule(same_range=True),
    "Pad": OpRule(same_range=True),
    "Tile": OpRule(same_range=True),
    "LSTM": OpRule(activations=(), dynamic=True),  # DynamicQuantizeLSTM (passes/dynamic_lstm.py)
}


def clamps_at_zero(node: ir.Node) -> bool:
    """A Relu, or a Clip from 0 (hard-swish's clip(x + 3, 0, 6), ReLU6): if its input's range
    starts at 0, the uint8 clamp of a quantized op's output reproduces it (its output's range
    never passes the upper bound)."""
    if node.op_type == "Relu":
        return True
    if node.op_type != "Clip" or len(node.inputs) < 2 or node.inputs[1] is None:
        return False
    low = node.inputs[1].const_value
    high = node.inputs[2] if len(node.inputs) > 2 else None
    return (
        low is not None
        and low.numpy().size == 1
        and float(low.numpy().ravel()[0]) == 0.0
        and (high is None or high.const_value is not None)
    )


# ORT fuses these with a float output (QGemm, MatMulIntegerToFloat): when no quantized op reads
# their output (a graph output, an FP32 op next), it stays float, with no requantization.
FLOAT_OUTPUT_FUSIONS = {"Gemm", "MatMul"}

POOLS = {"AveragePool", "GlobalAveragePool", "MaxPool"}


def is_float(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == ir.DataType.FLOAT


@dataclass(frozen=True)
class NodeDecision:
    name: str
    op_type: str
    precision: str  # "int8" or "fp32"
    reason: str = ""


@dataclass(frozen=True)
class Selection:
    """The policy's answer for a graph: the nodes that go to INT8, and for every other float
    compute node why it stays FP32 (Relus aside: whether one is folded depends on the plan)."""

    int8: frozenset[str]
    fp32: dict[str, str] = field(default_factory=dict)


OUTSIDE_INT8 = "data movement outside an INT8 region"
NOT_BETWEEN_INT8 = "INT8 only between INT8 ops, and its input or output is float here"


def select_nodes(
    model: ir.Model,
    exclude: tuple[str, ...] = (),
    activation_matmuls: bool = True,
    kept_fp32: dict[str, str] | None = None,
) -> Selection:
    """The nodes the policy would quantize, minus those excluded by name or op type, those in
    `kept_fp32` (name -> why, from measurements) and, unless `activation_matmuls`, MatMuls of
    two activations such as attention's.

    Data-movement ops are only worth running on uint8 next to quantized compute, so they are
    selected only when their data input comes from a selected node or their output goes only
    to selected nodes.
    """
    kept = kept_fp32 or {}
    excluded = set(exclude) | kept.keys()
    chosen: set[str] = set()
    reasons: dict[str, str] = {}
    for node in model.graph:
        if not node.outputs or not is_float(node.outputs[0]):
            continue
        rule = RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if node.name in kept:
            reasons[node.name] = kept[node.name]
        elif node.name in excluded or node.op_type in excluded:
            reasons[node.name] = "excluded by the user"
        elif rule is None:
            if not clamps_at_zero(node):
                reasons[node.name] = "no INT8 kernel in ONNX Runtime"
        elif (
            rule.weight is not None
            and not _has_constant(node, rule.weight)
            and (node.op_type != "MatMul" or not activation_matmuls)
        ):
            activations = node.op_type == "MatMul" and not activation_matmuls
            reasons[node.name] = (
                "a MatMul of two activations (attention), FP32 in this recipe"
                if activations
                else "its weight is not a constant"
            )
        elif rule.divisor is not None and not _has_reciprocal(node, rule.divisor):
            reasons[node.name] = (
                "it divides by an activation or by zero: no INT8 kernel in ONNX Runtime"
            )
        elif rule.dynamic and (blocker := _dynamic_blocker(node)):
            reasons[node.name] = blocker
        elif rule.same_range and not fed_by_int8(node, chosen):
            reasons[node.name] = OUTSIDE_INT8
        else:
            chosen.add(node.name)
    chosen = _with_movement_into_int8(model, _between_int8(model, chosen, reasons), excluded)
    for name in reasons.keys() & chosen:
        del reasons[name]
    for node in model.graph:
        if (
            node.name not in chosen
            and node.name not in reasons
            and node.op_type in RULES
            and is_float(node.outputs[0])
        ):
            reasons[node.name] = OUTSIDE_INT8  # dropped as a dead end
    return Selection(frozenset(chosen), reasons)


DYNAMIC = "int8 weights; ONNX Runtime quantizes its float input on each call"
ON_AMX_TILES = "on AMX tiles: its weights stored for ONNX Runtime's GEMM path"


def decisions(
    model: ir.Model,
    selection: Selection,
    absorbed: dict[str, str],
    amx_convs: set[str] = frozenset(),
) -> list[NodeDecision]:
    """One decision per float compute node, in graph order: INT8 or FP32, and why (for INT8,
    where it says more than INT8: folded into a clamp, or on AMX tiles)."""
    out = []
    for node in model.graph:
        if node.name in absorbed:
            out.append(NodeDecision(node.name, node.op_type, "int8", "folded into the uint8 clamp"))
        elif node.name in amx_convs:
            out.append(NodeDecision(node.name, node.op_type, "int8", ON_AMX_TILES))
        elif node.name in selection.int8:
            dynamic = RULES[node.op_type].dynamic
            out.append(NodeDecision(node.name, node.op_type, "int8", DYNAMIC if dynamic else ""))
        elif node.name in selection.fp32:
            out.append(NodeDecision(node.name, node.op_type, "fp32", selection.fp32[node.name]))
        elif clamps_at_zero(node) and is_float(node.outputs[0]):
            producer = node.inputs[0].producer()
            before = (
                "is an INT8 GEMM whose output stays float"
                if producer is not None and producer.name in selection.int8
                else "is FP32"
            )
            out.append(
                NodeDecision(
                    node.name,
                    node.op_type,
                    "fp32",
                    f"the op before it {before} (a {node.op_type} runs in INT8 only as a uint8 clamp)",
                )
            )
    return out


def sent_back(model: ir.Model, selection: Selection, reasons: dict[str, str]) -> Selection:
    """`selection` with the INT8 nodes of `reasons` (name -> why) back in FP32, and with each
    `between_int8` op whose input they then make float: a HardSwish after a Conv in FP32 would
    round the Conv's output to uint8 before it and its own output after it, where in FP32 only
    its output is rounded, for the next INT8 op (ONNX Runtime runs it in two element-wise passes
    either way: QLinearAdd and QLinearMul, or HardSigmoid and Mul). One whose reader goes back
    stays: its uint8 output is dequantized where its float input would have been, one
    conversion either way."""
    moved = {name: why for name, why in reasons.items() if name in selection.int8}
    fp32 = {**selection.fp32, **moved}
    chosen = set(selection.int8 - moved.keys())
    while orphans := {
        node.name
        for node in model.graph
        if node.name in chosen
        and RULES[node.op_type].between_int8
        and not fed_by_int8(node, chosen)
    }:
        chosen -= orphans
        fp32.update(dict.fromkeys(orphans, NOT_BETWEEN_INT8))
    return Selection(frozenset(chosen), fp32)


def _with_movement_into_int8(model: ir.Model, chosen: set[str], excluded: set[str]) -> set[str]:
    """Add the data movement that feeds only INT8 inputs from an FP32 op (an upsampling, a
    Conv3D's windows after an FP32 BatchNorm): it then runs on uint8 after one QuantizeLinear at
    the FP32 op's output, instead of in float with one per INT8 input."""
    for node in reversed(list(model.graph)):
        rule = RULES.get(node.op_type)
        if (
            rule is None
            or not rule.same_range
            or node.name in chosen
            or node.name in excluded
            or node.op_type in excluded
        ):
            continue
        if not is_float(node.outputs[0]):
            continue
        readers = [use for out in node.outputs for use in out.uses()]
        if readers and all(
            user.name in chosen and index in RULES[user.op_type].activations
            for user, index in readers
        ):
            chosen.add(node.name)
    return chosen


def _between_int8(model: ir.Model, chosen: set[str], reasons: dict[str, str]) -> set[str]:
    """`chosen` without dead-end data movement, and without the `between_int8` ops that lack
    a chosen op before them or have a reader that is not chosen (each dropped op can leave
    movement next to it a dead end, hence the loop); their reasons go into `reasons`."""
    while True:
        chosen = _without_dead_end_movement(model, chosen)
        alone = {
            node.name
            for node in model.graph
            if node.name in chosen
            and RULES[node.op_type].between_int8
            and not (
                fed_by_int8(node, chosen)
                and not node.outputs[0].is_graph_output()
                and all(on_uint8(user, chosen) for user, _ in node.outputs[0].uses())
            )
        }
        if not alone:
            return chosen
        chosen -= alone
        reasons.update(dict.fromkeys(alone, NOT_BETWEEN_INT8))


def _without_dead_end_movement(model: ir.Model, chosen: set[str]) -> set[str]:
    """Drop data-movement ops no selected node reads from: moving uint8 data only to
    dequantize it again costs a Q/DQ pair and forces a requantization before it. Concat counts:
    before an FP32 Conv (its 3D-to-2D windows) it would round that Conv's input to uint8."""
    movement = [
        n
        for n in model.graph
        if n.name in chosen and (RULES[n.op_type].same_range or n.op_type == "Concat")
    ]
    changed = True
    while changed:
        changed = False
        for node in movement:
            if node.name in chosen and not any(
                on_uint8(user, chosen) for out in node.outputs for user, _ in out.uses()
            ):
                chosen.discard(node.name)
                changed = True
    return chosen


def _dynamic_blocker(node: ir.Node) -> str | None:
    """Why an LSTM cannot become ORT's DynamicQuantizeLSTM, if it cannot: that kernel takes
    constant weights (W, R; B and the peepholes P if given)."""
    constants = [1, 2] + [i for i in (3, 7) if len(node.inputs) > i and node.inputs[i] is not None]
    if not all(_has_constant(node, i) and is_float(node.inputs[i]) for i in constants):
        return "its weights are not float constants"
    return None


def ort_only(model: ir.Model, runtime: str) -> dict[str, str]:
    """The nodes whose INT8 kernel only ONNX Runtime has (name -> why they stay FP32 in
    `runtime`): none for ONNX Runtime itself."""
    if runtime == "onnxruntime":
        return {}
    return {
        node.name: f"no INT8 {node.op_type} kernel in {runtime}"
        for node in model.graph
        if node.op_type in RULES and RULES[node.op_type].dynamic
    }


def _has_constant(node: ir.Node, index: int) -> bool:
    return (
        len(node.inputs) > index
        and node.inputs[index] is not None
        and node.inputs[index].const_value is not None
    )


def _has_reciprocal(node: ir.Node, index: int) -> bool:
    """Is input `index` a float constant without a zero?"""
    if not _has_constant(node, index) or not is_float(node.inputs[index]):
        return False
    return bool(np.all(node.inputs[index].const_value.numpy() != 0))


def fed_by_int8(node: ir.Node, chosen: set[str]) -> bool:
    """Does `node`'s data input come from a `chosen` node (through an activation its uint8
    clamp absorbs)?"""
    producer = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    if producer is not None and clamps_at_zero(producer):
        producer = producer.inputs[0].producer()
    return on_uint8(producer, chosen)


def read_by_int8(node: ir.Node, chosen: set[str]) -> bool:
    """Does a `chosen` node read `node`'s output (through an activation its uint8 clamp
    absorbs)?"""
    readers = [user for user, _ in node.outputs[0].uses()]
    readers += [user for r in readers if clamps_at_zero(r) for user, _ in r.outputs[0].uses()]
    return any(on_uint8(user, chosen) for user in readers)


def on_uint8(node: ir.Node | None, chosen: set[str]) -> bool:
    """Does `node` read and write uint8: chosen, and not a `dynamic` kernel (float in and out)?"""
    return node is not None and node.name in chosen and not RULES[node.op_type].dynamic


# The transformer policy's FP32 ops beyond those with no INT8 rule (LayerNormalization,
# Gelu/Erf, ...): the residual-stream Adds and the scaling Muls and Divs (attention's
# 1/sqrt(d)), whose ranges are set by a few outliers, and the key/value cache Concats
# (benchmarks/translator.py measures the alternative). Kept FP32 outside the convolutions only.
TRANSFORMER_FP32_OPS = ("Add", "Mul", "Div", "Concat")


def outside_convs(model: ir.Model, op_types: tuple[str, ...]) -> dict[str, str]:
    """The nodes of `op_types` outside a CNN's convolutions (name -> why they stay FP32): those
    with a reader that is neither a Conv (as its input X), nor a pool, nor a node of `op_types`
    inside. Inside are a CNN's shifts (folded from a hard-swish's affine), gates and concats of
    feature maps, whose output is rounded to uint8 for the Convs anyway."""
    inside: set[str] = set()
    for node in reversed(list(model.graph)):
        if node.op_type in op_types and _leads_into_convs(node, inside):
            inside.add(node.name)
    return {
        node.name: f"{node.op_type} outside the convolutions: FP32 in this recipe"
        for node in model.graph
        if node.op_type in op_types and node.name not in inside
    }


def _leads_into_convs(node: ir.Node, inside: set[str]) -> bool:
    uses = [use for out in node.outputs for use in out.uses()]
    return (
        bool(uses)
        and not any(out.is_graph_output() for out in node.outputs)
        and all(
            (user.op_type == "Conv" and index == 0) or user.op_type in POOLS or user.name in inside
            for user, index in uses
        )
    )
