"""Is a node's INT8 kernel faster than FP32 on this CPU? Measured, not assumed.

INT8 buys 4-8x on VNNI and AMX but only 1.5-2x on AVX2, and loses on some shapes (depthwise or
very small convolutions) where packing and requantization cost more than the multiply saves.
For each Conv, Gemm, weight MatMul and LSTM the policy chose, two one-node models are timed on
the node's input shape in one run of the FP32 model on a held-out batch, in interleaved blocks:

    int8:  uint8 -> DequantizeLinear -> op(int8 weight, int32 bias) -> QuantizeLinear -> uint8
           (ORT fuses it into QLinearConv / QGemm / QLinearMatMul)
    fp32:  uint8 -> DequantizeLinear -> op(float weight)            -> QuantizeLinear -> uint8

with the boundaries the plan gives the node: between INT8 neighbours, as above, the FP32 side
pays the dequantize and quantize it would need; where an FP32 op feeds it (or reads it, as the
transformer recipe's element-wise ops do), the input (or output) is float and the INT8 side
pays the QuantizeLinear (or DequantizeLinear) instead. A node goes back to FP32 only where
FP32 wins, by more than MARGIN and MIN_GAIN_MS, in a first measurement and again in a longer
second one: timing noise on a busy machine must not flip a decision (on AVX2, convs of a few
channels measure INT8/FP32 = 1.0 +- 0.05; a 7x7 conv on 3 input channels, a ResNet stem, 1.16).
A node whose INT8 model runs in under MIN_GAIN_MS at a glance keeps INT8 with no FP32 timing:
FP32 cannot beat it by that much. The screen of a fast node ends after SCREEN_CALLS runs of its
INT8 model rather than SCREEN's seconds: a tenth of a millisecond would otherwise be run a
thousand times for a median that a hundred runs settle, and the SE gates of a small CNN are
dozens of such nodes. Nodes of one shape and one set of attributes are timed once.
An LSTM (ORT's DynamicQuantizeLSTM, passes/dynamic_lstm.py) reads and writes float in both
precisions: its two one-node models are the FP32 LSTM and the integer kernel, on its input.
Timings describe this machine only: the pipeline measures only when the target is this CPU's.

On AMX a Conv has two INT8 forms (passes/amx_conv_weights.py): ORT's symmetric kernel (VNNI)
and its GEMM path (AMX tiles), which wins on large GEMMs over many output pixels and loses on
small ones (benchmarks/results/amx_conv_amx.md). Before the INT8-FP32 verdicts, each Conv large
enough to gain is timed in both forms (`faster_on_amx_tiles`), and goes on the tiles only where
they are faster by TILES_MARGIN and MIN_GAIN_MS, in a screen and again in the confirmation; its
verdict against FP32 then times that form.
"""

from typing import NamedTuple

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from onnxio import ObservingSession
from quantize import bench
from quantize.passes.amx_conv_weights import stored_for_gemm
from quantize.passes.dynamic_lstm import DynamicLstmPass
from quantize.passes.insert_qdq import quantized_weight, weight_channel_axis
from quantize.plan import QuantPlan
from quantize.policy import FLOAT_OUTPUT_FUSIONS, fed_by_int8, on_uint8, read_by_int8
from quantize.qparams import quantize_bias
from quantize.target import WeightFormat

TIMED_OPS = {"Conv", "Gemm", "MatMul", "LSTM"}
MARGIN = 0.10  # FP32 must be this much faster (relative) to win ...
MIN_GAIN_MS = 0.05  # ... and by at least this much per batch
# (seconds, rounds, calls per block at least): a quick screen, and the measurement that confirms it
SCREEN, CONFIRMATION = (0.2, 2, 2), (1.0, 4, 3)
SCREEN_CALLS = 100  # a screen stops sooner once the INT8 model has run this many times
SLOWER = "INT8 slower than FP32"  # how the reason of a node kept FP32 begins
# A Conv goes on AMX tiles (ORT's GEMM path) only where that measures this much faster than ORT's
# symmetric kernel (VNNI), and by MIN_GAIN_MS. It is timed only for a GEMM (output pixels x K by
# K x N) of at least these many output channels per group (N) and this long a reduction (K: input
# channels per group x kernel area): below them no Conv of ResNet-50 or the zoo's CNNs gained more
# than 9 % (benchmarks/results/amx_conv_amx.md).
TILES_MARGIN = 0.05
TILES_MIN_CHANNELS, TILES_MIN_REDUCTION = 64, 256


def slower_in_int8(
    model: onnx.ModelProto,
    graph: ir.Model,
    nodes: set[str],
    feeds: dict[str, np.ndarray],
    weights: WeightFormat,
    target: str,
    threads: int = 0,
    on_tiles: frozenset[str] = frozenset(),
) -> dict[str, str]:
    """The chosen nodes of `graph` (the IR of `model`) whose INT8 kernel measures slower than
    FP32 here, each with the reason; shapes are those of `model` run on `feeds`. The `on_tiles`
    Convs are timed in INT8 as they will run, on AMX tiles (`faster_on_amx_tiles`)."""
    timed = [
        n
        for n in graph.graph
        if n.name in nodes
        and n.op_type in TIMED_OPS
        and n.inputs[1] is not None
        and n.inputs[1].const_value is not None
    ]
    shapes = _input_shapes(model, timed, feeds, threads)
    verdicts: dict[tuple, str | None] = {}
    slower = {}
    for node in timed:
        shape = shapes[node.inputs[0].name]
        boundaries = (
            Boundaries(fed_by_int8(node, nodes), read_by_int8(node, nodes))
            if on_uint8(node, nodes)
            else Boundaries(False, False)  # a dynamic kernel reads and writes float
        )
        tiles = node.name in on_tiles
        key = (*_signature(node, shape), boundaries, tiles)
        if key not in verdicts:
            verdicts[key] = _verdict(node, shape, boundaries, weights, target, threads, tiles)
        if verdicts[key] is not None:
            slower[node.name] = verdicts[key]
    return slower


class Boundaries(NamedTuple):
    uint8_in: bool  # an INT8 op feeds the node, else its input is float
    uint8_out: bool  # an INT8 op reads it, else its output goes on in float


def faster_on_amx_tiles(
    model: onnx.ModelProto,
    graph: ir.Model,
    nodes: set[str],
    feeds: dict[str, np.ndarray],
    weights: WeightFormat,
    threads: int = 0,
) -> set[str]:
    """The Convs among `nodes` whose INT8 kernel measures faster on AMX tiles, their symmetric
    `weights` stored for ORT's GEMM path (passes/amx_conv_weights.py), than in ORT's symmetric
    VNNI kernel, at their shapes in `model` (the model of `graph`) run on `feeds`. For an AMX
    CPU; elsewhere the same comparison would measure two entries to the same VNNI kernels."""
    timed = [n for n in graph.graph if n.name in nodes and _tiles_candidate(n, weights)]
    shapes = _input_shapes(model, timed, feeds, threads)
    faster: dict[tuple, bool] = {}
    chosen = set()
    for node in timed:
        shape = shapes[node.inputs[0].name]
        boundaries = Boundaries(fed_by_int8(node, nodes), read_by_int8(node, nodes))
        key = (*_signature(node, shape), boundaries)
        if key not in faster:
            faster[key] = _faster_on_tiles(node, shape, boundaries, weights, threads)
        if faster[key]:
            chosen.add(node.name)
    return chosen


def _tiles_candidate(node: ir.Node, weights: WeightFormat) -> bool:
    if node.op_type != "Conv" or node.inputs[1].const_value is None or weights.zero_point != 0:
        return False
    weight = node.inputs[1].const_value
    outputs, inputs, *kernel = weight.shape.dims
    return (
        outputs // node.attributes.get_int("group", 1) >= TILES_MIN_CHANNELS
        and inputs * int(np.prod(kernel)) >= TILES_MIN_REDUCTION
    )


def _faster_on_tiles(
    node: ir.Node, shape: tuple[int, ...], boundaries: Boundaries, weights: WeightFormat, threads
) -> bool:
    x = _input(shape, boundaries)
    models = {
        form: _one_node_model(node, shape, "int8", weights, boundaries, form == "tiles")
        for form in ("symmetric", "tiles")
    }
    if bench.glance_ms(models["symmetric"], {"x": x}, threads) < MIN_GAIN_MS:
        return False  # the tiles cannot save MIN_GAIN_MS: ORT's default kernel stays
    for seconds, rounds, min_block in (SCREEN, CONFIRMATION):
        timed = bench.compare_sessions(models, {"x": x}, threads, seconds, rounds, min_block)
        symmetric_ms, tiles_ms = (timed[form]["latency_ms_p50"] for form in models)
        if tiles_ms > symmetric_ms * (1 - TILES_MARGIN) or symmetric_ms - tiles_ms < MIN_GAIN_MS:
            return False
    return True


def _input(shape: tuple[int, ...], boundaries: Boundaries) -> np.ndarray:
    x = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    return x if boundaries.uint8_in else x.astype(np.float32) - 128


def _verdict(
    node: ir.Node,
    shape: tuple[int, ...],
    boundaries: Boundaries,
    weights: WeightFormat,
    target: str,
    threads: int,
    on_tiles: bool,
) -> str | None:
    x = _input(shape, boundaries)
    int8 = _one_node_model(node, shape, "int8", weights, boundaries, on_tiles)
    glance_ms = bench.glance_ms(int8, {"x": x}, threads)
    if glance_ms < MIN_GAIN_MS:
        return None  # FP32 cannot be faster by MIN_GAIN_MS: it need not be timed
    models = {"int8": int8, "fp32": _one_node_model(node, shape, "fp32", weights, boundaries)}
    screen = (min(SCREEN[0], SCREEN_CALLS * glance_ms / 1e3), *SCREEN[1:])
    for seconds, rounds, min_block in (screen, CONFIRMATION):
        timed = bench.compare_sessions(models, {"x": x}, threads, seconds, rounds, min_block)
        int8_ms, fp32_ms = (timed[p]["latency_ms_p50"] for p in ("int8", "fp32"))
        if int8_ms <= fp32_ms * (1 + MARGIN) or int8_ms - fp32_ms < MIN_GAIN_MS:
            return None
    return f"{SLOWER} on {target}: {int8_ms:.2f} ms vs {fp32_ms:.2f} ms for a batch of {shape[0]}, measured here"


def _one_node_model(
    node: ir.Node,
    shape: tuple[int, ...],
    precision: str,
    weights: WeightFormat,
    boundaries: Boundaries,
    on_tiles: bool = False,
) -> onnx.ModelProto:
    """uint8 x -> DequantizeLinear -> the node -> QuantizeLinear -> uint8 y, where x and y are
    uint8 by `boundaries`; a float x or y is read or written as it is in FP32, and quantized or
    dequantized in INT8. In INT8 the weight and bias are in the weight format and int32 behind
    DequantizeLinears (ORT fuses it into its integer kernel); in FP32 they are float and x's
    DequantizeLinear is per channel, as InsertQDQPass writes it for an FP32 node, so that ORT
    does not quantize the weight itself. `on_tiles`: INT8 weights stored for ORT's GEMM path, as
    AmxConvWeightsPass stores them."""
    if node.op_type == "LSTM":
        return _one_lstm_model(node, shape, precision, weights)
    weight = node.inputs[1].const_value.numpy()
    bias = (
        node.inputs[2].const_value.numpy()
        if len(node.inputs) > 2 and node.inputs[2] is not None and node.op_type != "MatMul"
        else None
    )
    arrays = {"one": np.float32(1.0), "mid": np.uint8(128)}
    if precision == "fp32":
        arrays.update(
            ones=np.ones(shape[1], np.float32), mids=np.full(shape[1], 128, np.uint8), w=weight
        )
        nodes = _input_nodes(precision, boundaries.uint8_in)
        if bias is not None:
            arrays["b"] = bias
    else:
        axis = weight_channel_axis(node, weight)
        q, scale, zero_point = quantized_weight(node, weight, weights)
        if on_tiles:
            q, zero_point = stored_for_gemm(q, zero_point)
        arrays.update(w_q=q, w_scale=scale, w_zero=zero_point)
        nodes = [
            *_input_nodes(precision, boundaries.uint8_in),
            helper.make_node(
                "DequantizeLinear",
                ["w_q", "w_scale", "w_zero"],
                ["w"],
                **({"axis": axis} if scale.size > 1 else {}),
            ),
        ]
        if (
            bias is not None and bias.ndim != 1
        ):  # a Gemm's 2-D C stays float, as InsertQDQPass leaves it
            arrays["b"] = bias
        elif bias is not None:
            q_bias, bias_scale = quantize_bias(bias, np.float32(1.0), scale)
            arrays.update(
                b_q=q_bias, b_scale=bias_scale, b_zero=np.zeros_like(bias_scale, np.int32)
            )
            nodes.append(
                helper.make_node(
                    "DequantizeLinear",
                    ["b_q", "b_scale", "b_zero"],
                    ["b"],
                    **({"axis": 0} if bias_scale.size > 1 else {}),
                )
            )
    op = helper.make_node(
        node.op_type, ["x_float", "w", *(["b"] if bias is not None else [])], ["y_float"]
    )
    op.attribute.extend(ir.serde.serialize_attribute(a) for a in node.attributes.values())
    nodes += [op, *_output_nodes(node.op_type, precision, boundaries.uint8_out)]
    graph = helper.make_graph(
        nodes,
        f"{node.op_type}_{precision}",
        [helper.make_tensor_value_info("x", _element_type(boundaries.uint8_in), shape)],
        [helper.make_tensor_value_info("y", _element_type(boundaries.uint8_out), None)],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in arrays.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _one_lstm_model(
    node: ir.Node, shape: tuple[int, ...], precision: str, weights: WeightFormat
) -> onnx.ModelProto:
    """x -> the LSTM -> y, float in and out in both precisions (ONNX Runtime's INT8 LSTM
    quantizes inside its kernel), from a zero state over full-length sequences; in INT8 as
    DynamicLstmPass writes it, with weights in `weights`."""
    arrays = {
        name: node.inputs[index].const_value.numpy()
        for index, name in ((1, "w"), (2, "r"), (3, "b"), (7, "p"))
        if len(node.inputs) > index and node.inputs[index] is not None
    }
    inputs = ["x", "w", "r", "b" if "b" in arrays else "", "", "", "", "p" if "p" in arrays else ""]
    op = helper.make_node("LSTM", inputs, ["y", "y_h", "y_c"], name="lstm")
    op.attribute.extend(ir.serde.serialize_attribute(a) for a in node.attributes.values())
    graph = helper.make_graph(
        [op],
        f"LSTM_{precision}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in arrays.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if precision == "fp32":
        return model
    lowered = DynamicLstmPass(QuantPlan({"lstm"}, {}, weights))(ir.serde.deserialize_model(model))
    return ir.serde.serialize_model(lowered.model)


def _input_nodes(precision: str, uint8_in: bool) -> list[onnx.NodeProto]:
    """From x to the op's float x_float: dequantized where x is uint8 (per channel in FP32, see
    `_one_node_model`). Where x is float, FP32 reads it as it is and INT8 quantizes it first."""
    if precision == "fp32":
        if uint8_in:
            return [
                helper.make_node("DequantizeLinear", ["x", "ones", "mids"], ["x_float"], axis=1)
            ]
        return [helper.make_node("Identity", ["x"], ["x_float"])]
    quantized = "x" if uint8_in else "x_uint8"
    nodes = (
        [] if uint8_in else [helper.make_node("QuantizeLinear", ["x", "one", "mid"], [quantized])]
    )
    return [*nodes, helper.make_node("DequantizeLinear", [quantized, "one", "mid"], ["x_float"])]


def _output_nodes(op_type: str, precision: str, uint8_out: bool) -> list[onnx.NodeProto]:
    """From the op's float y_float to y: quantized where y is uint8. Where y is float, INT8
    quantizes and dequantizes it as InsertQDQPass does (ORT: the kernel's uint8 output and a
    DequantizeLinear), except a GEMM, which ORT runs with a float output."""
    if not uint8_out and (precision == "fp32" or op_type in FLOAT_OUTPUT_FUSIONS):
        return [helper.make_node("Identity", ["y_float"], ["y"])]
    quantized = "y" if uint8_out else "y_uint8"
    nodes = [helper.make_node("QuantizeLinear", ["y_float", "one", "mid"], [quantized])]
    if not uint8_out:
        nodes.append(helper.make_node("DequantizeLinear", [quantized, "one", "mid"], ["y"]))
    return nodes


def _element_type(uint8: bool) -> int:
    return TensorProto.UINT8 if uint8 else TensorProto.FLOAT


def _input_shapes(
    model: onnx.ModelProto, nodes: list[ir.Node], feeds: dict[str, np.ndarray], threads: int
) -> dict[str, tuple[int, ...]]:
    names = list({n.inputs[0].name: None for n in nodes if n.inputs[0].name not in feeds})
    shapes = {name: feeds[name].shape for name in {n.inputs[0].name for n in nodes} & set(feeds)}
    if names:
        for fetched in ObservingSession(model, names, threads).run(feeds, split_rows=False):
            shapes.update({name: value.shape for name, value in fetched.items()})
    return shapes


def _signature(node: ir.Node, shape: tuple[int, ...]) -> tuple:
    attributes = tuple(sorted((name, str(a.value)) for name, a in node.attributes.items()))
    bias = len(node.inputs) > 2 and node.inputs[2] is not None
    return node.op_type, shape, node.inputs[1].const_value.shape.dims, bias, attributes
