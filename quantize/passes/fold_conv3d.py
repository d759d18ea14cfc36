"""Lower Conv3D to a 2D Conv by folding the kernel's depth into channels.

ONNX Runtime's INT8 3D convolution is slower than its FP32 one; its 2D QLinearConv is fast.
For X (N, C, D, H, W) and a kernel (kd, kh, kw), output depth d needs input depths d..d+kd-1:
the kd shifted depth windows are concatenated as channels, output depths move into the batch,
and one 2D Conv with weights (K, kd*C, kh, kw) computes every output depth:

    Pad(D) -> Slice x kd -> Concat(channels) -> Reshape(N*Do, H, W, kd*C) -> Transpose(NCHW)
    -> Conv2D -> Transpose(NHWC) -> Reshape(N, Do, Ho, Wo, K) -> Transpose(N, K, Do, Ho, Wo)

It works channels-last (NDHWC), the layout TensorFlow exports feed Conv3D through a Transpose:
the Transposes it puts around the 2D Conv are exactly the inverses of those ONNX Runtime adds
around its NHWC QLinearConv, and the last one cancels the exporter's next Transpose back to
NDHWC (`CancelTransposesPass`), so no data is transposed at all in the end.

Only stride 1, dilation 1, group 1 and static D/H/W are lowered; other Conv3Ds stay as they are.
"""

TO_CHANNELS_LAST = [0, 2, 3, 4, 1]
TO_CHANNELS_FIRST = [0, 4, 1, 2, 3]

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, replace_nodes


def _ints(node: ir.Node, name: str, default):
    return list(node.attributes[name].value) if name in node.attributes else default


class FoldConv3DPass(FusionPass):
    def match(self, conv: ir.Node) -> bool | None:
        if conv.op_type != "Conv" or len(conv.inputs) < 2 or conv.inputs[1] is None or conv.inputs[1].const_value is None:
            return None
        x = conv.inputs[0]
        if len(conv.inputs[1].const_value.shape) != 5 or x.shape is None or len(x.shape) != 5:
            return None
        if any(not isinstance(d, int) for d in list(x.shape)[2:]) or "auto_pad" in conv.attributes and conv.attributes["auto_pad"].value not in ("NOTSET", ""):
            return None
        plain = _ints(conv, "strides", [1, 1, 1]) == [1, 1, 1] and _ints(conv, "dilations", [1, 1, 1]) == [1, 1, 1]
        return True if plain and (conv.attributes["group"].value if "group" in conv.attributes else 1) == 1 else None

    def rewrite(self, graph: ir.Graph, conv: ir.Node, _) -> None:
        x, weight = conv.inputs[0], conv.inputs[1].const_value.numpy()
        k, c, kd, kh, kw = weight.shape
        _, _, d, h, w = list(x.shape)
        pads = _ints(conv, "pads", [0] * 6)
        d_out = d + pads[0] + pads[3] - kd + 1
        h_out, w_out = h + pads[1] + pads[4] - kh + 1, w + pads[2] + pads[5] - kw + 1
        name = conv.name

        def const(suffix, array):
            return add_initializer(graph, f"{name}_{suffix}", np.asarray(array))

        def node(op, inputs, suffix, **attributes):
            attrs = [ir.AttrInt64s(key, v) if isinstance(v, list) else ir.AttrInt64(key, v) for key, v in attributes.items()]
            made = ir.Node("", op, inputs, attributes=attrs, name=f"{name}_{suffix}")
            chain.append(made)
            return made.outputs[0]

        chain: list[ir.Node] = []
        source = node("Transpose", [x], "channels_last", perm=TO_CHANNELS_LAST)  # (N, D, H, W, C)
        if pads[0] or pads[3]:
            source = node("Pad", [source, const("depth_pads", np.array([0, pads[0], 0, 0, 0, 0, pads[3], 0, 0, 0], np.int64))], "pad_depth")
        axis = const("axis", np.array([1], np.int64))
        windows = [node("Slice", [source, const(f"start{i}", np.array([i], np.int64)), const(f"end{i}", np.array([i + d_out], np.int64)), axis], f"window{i}")
                   for i in range(kd)]
        stacked = node("Concat", windows, "windows", axis=4)  # channel i*C + c
        flat = node("Reshape", [stacked, const("shape2d", np.array([-1, h, w, kd * c], np.int64))], "to_2d")
        nchw = node("Transpose", [flat], "to_nchw", perm=[0, 3, 1, 2])
        folded = const("weight2d", weight.transpose(0, 2, 1, 3, 4).reshape(k, kd * c, kh, kw))
        conv2d = node("Conv", [nchw, folded, *conv.inputs[2:3]], "2d", pads=[pads[1], pads[2], pads[4], pads[5]], kernel_shape=[kh, kw])
        nhwc = node("Transpose", [conv2d], "to_nhwc", perm=[0, 2, 3, 1])
        node("Reshape", [nhwc, const("shape3d", np.array([-1, d_out, h_out, w_out, k], np.int64))], "to_3d")
        result = ir.Node("", "Transpose", [chain[-1].outputs[0]], attributes=[ir.AttrInt64s("perm", TO_CHANNELS_FIRST)], name=f"{name}_channels_first")
        for made in chain:
            graph.insert_before(conv, made)
        replace_nodes(graph, [conv], result)
