"""A Conv's, Gemm's or MatMul's input zero point moved into its bias (and a Conv's padding),
for OpenVINO.

OpenVINO's INT8 convolutions run slower on a uint8 input with a zero point z != 0 than on one
from zero: YOLOv8n's 3x3 Convs, reading SiLU outputs that dip just below zero, took 1.55 ms a run
at their zero points and 1.00 ms as this pass writes them, on AMX
(benchmarks/results/openvino_activations_amx.md at 035f7c2). Yet with q the uint8 input, s
its scale and W the weights,

    Conv(s * (q - z), W) + b  =  Conv(s * q, W) + b - s * z * sum(W)

when the padded border of q holds z (0 of the dequantized input). So the Conv reads q
dequantized from zero, padded with z by a Pad on the uint8 tensor, and its int32 bias takes
the rest: the same arithmetic, exact in integers. A Gemm is the same with no padding (its
int32 bias takes s * z times the column sums of its B), and so is a MatMul by constant weights
followed by a bias Add: the Add's bias takes them (in float, as the Add is). ONNX Runtime, whose
kernels do not care, keeps the form with the zero point."""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import (
    NodeChain,
    dequantized,
    int_list,
    integer_weights,
    integer_weights_and_bias,
    per_tensor_dequantizer,
    raised_bias,
    set_bias,
    uses_auto_pad,
    weight_sums,
)

INT32_LIMIT = np.iinfo(np.int32).max


class ZeroPointIntoBiasPass(ir.passes.InPlacePass):
    """Rewrites each DQ(q; s, z) -> Conv(pads, W, b), z != 0 a uint8 zero point, W dequantized
    integer weights and b a dequantized int32 bias or none, into
    Pad(q, pads, z) -> DQ(s, 0) -> Conv(no pads, W, b - z * s * sum(W)).
    Other readers of q keep their DequantizeLinear.

    A Conv with auto_pad, or whose lowered bias would leave int32, stays as it is. A Gemm
    (A not transposed, alpha and beta 1) is rewritten as a Conv without padding is. Likewise
    DQ(q; s, z) @ DQ(W) + b, W a constant matrix and b a constant vector over its columns,
    becomes DQ(q; s, 0) @ DQ(W) + (b - z * s * column sums of W)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        moved = [
            node
            for node in list(graph)
            if _moved_conv_or_gemm(graph, node) or _moved_matmul(graph, node)
        ]
        return ir.passes.PassResult(model, modified=bool(moved))


def _moved_conv_or_gemm(graph: ir.Graph, node: ir.Node) -> bool:
    """Moves `node`'s input zero point into its bias (and a Conv's padding) if it has one to
    move."""
    if not _plain_conv_or_gemm(node) or not integer_weights(node):
        return False
    dequantize = _shifted_input(node)
    biased = len(node.inputs) > 2 and node.inputs[2] is not None
    if dequantize is None or (biased and not integer_weights_and_bias(node)):
        return False
    quantized, scale, zero_point = dequantize.inputs
    z = zero_point.const_value.numpy()
    s = float(scale.const_value.numpy())
    bias = raised_bias(node, -s * int(z)) if biased else _bias_of_zero_point(node, int(z))
    if np.abs(bias).max() > INT32_LIMIT:
        return False
    chain = NodeChain(graph, node.name)
    padded = _padded_with_zero_point(chain, node, quantized, zero_point)
    from_zero = _from_zero(chain, node.inputs[0], padded, scale)
    new_bias = None if biased else _dequantized_bias(chain, bias, s * _weight_scales(node))
    if new_bias is not None:
        new_bias.type = from_zero.type
    graph.insert_before(node, chain.nodes)
    node.replace_input_with(0, from_zero)
    if new_bias is None:
        set_bias(graph, node, bias.astype(np.int32), f"{node.name}_bias_from_zero")
    else:
        node.resize_inputs(3)
        node.replace_input_with(2, new_bias)
    return True


def _plain_conv_or_gemm(node: ir.Node) -> bool:
    """A Conv without auto_pad, or a Gemm computing A @ B + C as written."""
    if node.op_type == "Conv":
        return not uses_auto_pad(node)
    return (
        node.op_type == "Gemm"
        and node.attributes.get_int("transA", 0) == 0
        and node.attributes.get_float("alpha", 1.0) == 1.0
        and node.attributes.get_float("beta", 1.0) == 1.0
    )


def _moved_matmul(graph: ir.Graph, matmul: ir.Node) -> bool:
    """Moves `matmul`'s input zero point into the bias Add after it, if it has one to move."""
    if matmul.op_type != "MatMul" or _shifted_input(matmul) is None:
        return False
    weights = _constant_matrix(matmul.inputs[1])
    if weights is None:
        return False
    product = matmul.outputs[0]
    uses = product.uses()
    if product.is_graph_output() or len(uses) != 1 or uses[0][0].op_type != "Add":
        return False
    add, index = uses[0]
    bias = add.inputs[1 - index]
    if bias.const_value is None or bias.const_value.numpy().shape != weights.shape[1:]:
        return False
    _, scale, zero_point = matmul.inputs[0].producer().inputs
    shift = float(scale.const_value.numpy()) * int(zero_point.const_value.numpy())
    lowered = bias.const_value.numpy() - shift * weights.sum(axis=0)
    chain = NodeChain(graph, matmul.name)
    from_zero = _from_zero(chain, matmul.inputs[0], matmul.inputs[0].producer().inputs[0], scale)
    graph.insert_before(matmul, chain.nodes)
    matmul.replace_input_with(0, from_zero)
    add.replace_input_with(1 - index, chain.const("bias_from_zero", lowered.astype(np.float32)))
    return True


def _shifted_input(node: ir.Node) -> ir.Node | None:
    """The DequantizeLinear of `node`'s first input if it reads uint8 at a zero point z != 0."""
    dequantize = per_tensor_dequantizer(node.inputs[0])
    if dequantize is None:
        return None
    z = dequantize.inputs[2].const_value.numpy()
    return dequantize if z.dtype == np.uint8 and int(z) != 0 else None


def _constant_matrix(value: ir.Value) -> np.ndarray | None:
    """The dequantized constant 2-D weights behind `value`, if they are."""
    dequantize = value.producer()
    if dequantize is None or dequantize.op_type != "DequantizeLinear":
        return None
    if any(v is None or v.const_value is None for v in dequantize.inputs):
        return None
    return dequantized(dequantize) if dequantize.inputs[0].const_value.numpy().ndim == 2 else None


def _from_zero(chain: NodeChain, like: ir.Value, quantized: ir.Value, scale: ir.Value) -> ir.Value:
    """`quantized` dequantized at `scale` from zero, typed as `like`."""
    value = chain.node(
        "DequantizeLinear", [quantized, scale, chain.const("zero_point", np.uint8(0))], "input"
    )
    value.type = like.type
    return value


def _padded_with_zero_point(
    chain: NodeChain, node: ir.Node, quantized: ir.Value, zero_point: ir.Value
) -> ir.Value:
    """`quantized` padded as `node` (a Conv; a Gemm pads none) pads its input, with
    `zero_point`; `node` then pads none."""
    pads = int_list(node, "pads", [])
    if not any(pads):
        return quantized
    half = len(pads) // 2
    widths = chain.const("pads", np.array([0, 0, *pads[:half], 0, 0, *pads[half:]], np.int64))
    padded = chain.node("Pad", [quantized, widths, zero_point], "zero_point_pad")
    padded.type = quantized.type
    node.attributes["pads"] = ir.AttrInt64s("pads", [0] * len(pads))
    return padded


def _weight_scales(node: ir.Node) -> np.ndarray:
    """`node`'s weight scale per output channel (a Gemm's per column of its B, as its weight
    sums are)."""
    scale = node.inputs[1].producer().inputs[1].const_value.numpy().astype(np.float64)
    return np.broadcast_to(scale, weight_sums(node).shape)


def _bias_of_zero_point(node: ir.Node, z: int) -> np.ndarray:
    """-z * s * sum(W) in int32 steps of s times the weight scales: the bias a Conv or Gemm
    without one takes."""
    return np.round(-z * weight_sums(node) / _weight_scales(node)).astype(np.int64)


def _dequantized_bias(chain: NodeChain, bias: np.ndarray, scales: np.ndarray) -> ir.Value:
    return chain.node(
        "DequantizeLinear",
        [
            chain.const("bias_quantized", bias.astype(np.int32)),
            chain.const("bias_scale", scales.astype(np.float32)),
            chain.const("bias_zero_point", np.zeros(bias.shape, np.int32)),
        ],
        "bias",
        axis=0,
    )
