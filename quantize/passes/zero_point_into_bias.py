"""A Conv's input zero point moved into its bias and its padding, for OpenVINO.

OpenVINO's INT8 convolutions run a uint8 input with a zero point z != 0 at about half the speed
of one from zero: YOLOv8n's 3x3 Convs took 1.95 ms against 0.79 ms on AMX
(benchmarks/openvino_activations.py), its SiLU outputs dipping just below zero. Yet with
q the uint8 input, s its scale and W the weights,

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
    int8 weights and b a dequantized int32 bias or none, into
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
    shift = -float(scale.const_value.numpy()) * int(z)
    if biased:
        bias_scale = None
        bias = raised_bias(conv, shift)
    else:
        weight_scale = conv.inputs[1].producer().inputs[1].const_value.numpy()
        sums = weight_sums(conv)
        bias_scale = np.broadcast_to(float(scale.const_value.numpy()) * weight_scale, sums.shape)
        bias = np.round(shift * sums / bias_scale.astype(np.float64)).astype(np.int64)
    if np.abs(bias).max() > INT32_LIMIT:
        return False
    chain = NodeChain(graph, conv.name)
    pads = int_list(conv, "pads", [])
    if any(pads):
        half = len(pads) // 2
        widths = chain.const("pads", np.array([0, 0, *pads[:half], 0, 0, *pads[half:]], np.int64))
        quantized = chain.node("Pad", [quantized, widths, zero_point], "zero_point_pad")
        quantized.type = dequantize.inputs[0].type
        conv.attributes["pads"] = ir.AttrInt64s("pads", [0] * len(pads))
    from_zero = chain.node(
        "DequantizeLinear", [quantized, scale, chain.const("zero_point", np.uint8(0))], "input"
    )
    from_zero.type = conv.inputs[0].type
    if bias_scale is not None:
        added = chain.node(
            "DequantizeLinear",
            [
                chain.const("bias_quantized", bias.astype(np.int32)),
                chain.const("bias_scale", bias_scale.astype(np.float32)),
                chain.const("bias_zero_point", np.zeros(bias.shape, np.int32)),
            ],
            "bias",
            axis=0,
        )
        added.type = conv.inputs[0].type
    graph.insert_before(conv, chain.nodes)
    conv.replace_input_with(0, from_zero)
    if bias_scale is None:
        set_bias(graph, conv, bias.astype(np.int32), f"{conv.name}_bias_from_zero")
    else:
        conv.resize_inputs(3)
        conv.replace_input_with(2, added)
    return True
