"""Lower Conv3D to a 2D Conv by folding the kernel's depth into channels.

ONNX Runtime's INT8 3D convolution is slower than its FP32 one; its 2D QLinearConv is fast.
For X (N, C, D, H, W) and a kernel (kd, kh, kw), output depth d needs input depths d..d+kd-1:
the kd shifted depth windows are concatenated as channels, output depths move into the batch,
and one 2D Conv with weights (K, kd*C, kh, kw) computes every output depth:

    Pad(D) -> Slice x kd -> Concat(channels) -> Transpose -> Reshape(N*Do, kd*C, H, W)
    -> Conv2D -> Reshape(N, Do, K, Ho, Wo) -> Transpose(N, K, Do, Ho, Wo)

Only stride 1, dilation 1, group 1 and static D/H/W are lowered; other Conv3Ds stay as they are.
"""

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
        const = lambda suffix, array: add_initializer(graph, f"{name}_{suffix}", np.asarray(array))  # noqa: E731
        nodes, source = [], x
        if pads[0] or pads[3]:
            pad = ir.Node("", "Pad", [x, const("depth_pads", np.array([0, 0, pads[0], 0, 0, 0, 0, pads[3], 0, 0], np.int64))], name=f"{name}_pad_depth")
            nodes.append(pad)
            source = pad.outputs[0]
        windows = []
        for i in range(kd):
            window = ir.Node("", "Slice", [source, const(f"start{i}", np.array([i], np.int64)), const(f"end{i}", np.array([i + d_out], np.int64)),
                                           const("axis", np.array([2], np.int64)) if i == 0 else nodes[-1].inputs[3]], name=f"{name}_window{i}")
            nodes.append(window)
            windows.append(window.outputs[0])
        concat = ir.Node("", "Concat", windows, attributes=[ir.AttrInt64("axis", 1)], name=f"{name}_windows")
        to_batch = ir.Node("", "Transpose", [concat.outputs[0]], attributes=[ir.AttrInt64s("perm", [0, 2, 1, 3, 4])], name=f"{name}_depth_first")
        flat = ir.Node("", "Reshape", [to_batch.outputs[0], const("shape2d", np.array([-1, kd * c, h, w], np.int64))], name=f"{name}_to_2d")
        folded = weight.transpose(0, 2, 1, 3, 4).reshape(k, kd * c, kh, kw)
        inputs = [flat.outputs[0], const("weight2d", folded)] + list(conv.inputs[2:3])
        conv2d = ir.Node("", "Conv", inputs, attributes=[ir.AttrInt64s("pads", [pads[1], pads[2], pads[4], pads[5]]),
                                                         ir.AttrInt64s("kernel_shape", [kh, kw])], name=f"{name}_2d")
        back = ir.Node("", "Reshape", [conv2d.outputs[0], const("shape3d", np.array([-1, d_out, k, h_out, w_out], np.int64))], name=f"{name}_to_3d")
        result = ir.Node("", "Transpose", [back.outputs[0]], attributes=[ir.AttrInt64s("perm", [0, 2, 1, 3, 4])], name=f"{name}_channels_first")
        chain = nodes + [concat, to_batch, flat, conv2d, back]
        for node in chain:
            graph.insert_before(conv, node)
        replace_nodes(graph, [conv], result)
