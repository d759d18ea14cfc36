"""A Conv's input zero point moved into its bias and its padding, for OpenVINO.

OpenVINO's INT8 convolutions run slower on a uint8 input with a zero point z != 0 than on one
from zero: YOLOv8n's 3x3 Convs, reading SiLU outputs that dip just below zero, took 1.91 ms a run
at their zero points and 1.15 ms as this pass writes them, on AMX
(benchmarks/results/openvino_activations_amx.md). Yet with q the uint8 input, s its scale and W
the weights,

    Conv(s * (q - z), W) + b  =  Conv(s * q, W) + b - s * z * sum(W)

when the padded border of q holds z (0 of the dequantized input). So the Conv reads q
dequantized from zero, padded with z by a Pad on the uint8 tensor, and its int32 bias takes
the rest: the same arithmetic, exact in integers. ONNX Runtime, whose kernels do not care,
keeps the form with the zero point."""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import (
    NodeChain,
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

    A Conv with auto_pad, or whose lowered bias would leave int32, stays as it is."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        moved = [conv for conv in list(model.graph) if _moved(model.graph, conv)]
        return ir.passes.PassResult(model, modified=bool(moved))


def _moved(graph: ir.Graph, conv: ir.Node) -> bool:
    """Moves `conv`'s input zero point into its bias and padding if it has one to move."""
    if conv.op_type != "Conv" or uses_auto_pad(conv) or not integer_weights(conv):
        return False
    dequantize = per_tensor_dequantizer(conv.inputs[0])
    if dequantize is None:
        return False
    quantized, scale, zero_point = dequantize.inputs
    z = zero_point.const_value.numpy()
    biased = len(conv.inputs) > 2 and conv.inputs[2] is not None
    if z.dtype != np.uint8 or int(z) == 0 or (biased and not integer_weights_and_bias(conv)):
        return False
    s = float(scale.const_value.numpy())
    bias = raised_bias(conv, -s * int(z)) if biased else _bias_of_zero_point(conv, int(z))
    if np.abs(bias).max() > INT32_LIMIT:
        return False
    chain = NodeChain(graph, conv.name)
    padded = _padded_with_zero_point(chain, conv, quantized, zero_point)
    from_zero = chain.node(
        "DequantizeLinear", [padded, scale, chain.const("zero_point", np.uint8(0))], "input"
    )
    from_zero.type = conv.inputs[0].type
    new_bias = None if biased else _dequantized_bias(chain, bias, s * _weight_scales(conv))
    if new_bias is not None:
        new_bias.type = from_zero.type
    graph.insert_before(conv, chain.nodes)
    conv.replace_input_with(0, from_zero)
    if new_bias is None:
        set_bias(graph, conv, bias.astype(np.int32), f"{conv.name}_bias_from_zero")
    else:
        conv.resize_inputs(3)
        conv.replace_input_with(2, new_bias)
    return True


def _padded_with_zero_point(
    chain: NodeChain, conv: ir.Node, quantized: ir.Value, zero_point: ir.Value
) -> ir.Value:
    """`quantized` padded as `conv` pads its input, with `zero_point`; `conv` then pads none."""
    pads = int_list(conv, "pads", [])
    if not any(pads):
        return quantized
    half = len(pads) // 2
    widths = chain.const("pads", np.array([0, 0, *pads[:half], 0, 0, *pads[half:]], np.int64))
    padded = chain.node("Pad", [quantized, widths, zero_point], "zero_point_pad")
    padded.type = quantized.type
    conv.attributes["pads"] = ir.AttrInt64s("pads", [0] * len(pads))
    return padded


def _weight_scales(conv: ir.Node) -> np.ndarray:
    """`conv`'s weight scale per output channel."""
    scale = conv.inputs[1].producer().inputs[1].const_value.numpy().astype(np.float64)
    return np.broadcast_to(scale, weight_sums(conv).shape)


def _bias_of_zero_point(conv: ir.Node, z: int) -> np.ndarray:
    """-z * s * sum(W) in int32 steps of s times the weight scales: the bias a Conv without one
    takes."""
    return np.round(-z * weight_sums(conv) / _weight_scales(conv)).astype(np.int64)


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
