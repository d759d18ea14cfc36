"""Lower Conv3D to a 2D Conv by folding the kernel's depth into channels.

ONNX Runtime's INT8 3D convolution is slower than its FP32 one; its 2D QLinearConv is fast.
For X (N, C, D, H, W) and a kernel (kd, kh, kw), output depth d needs input depths d..d+kd-1:
the kd shifted depth windows are concatenated as channels, output depths move into the batch,
and one 2D Conv with weights (K, kd*C, kh, kw) computes every output depth:

    Pad(D) -> Slice x kd -> Concat(channels) -> Reshape(N*Do, H, W, kd*C) -> Transpose(NCHW)
    -> Conv2D -> Transpose(NHWC) -> Reshape(N, Do, Ho, Wo, K) -> Transpose(N, K, Do, Ho, Wo)

The folded axis is the first one without padding when there is one (so no Pad is needed and
the padding stays the 2D Conv's own); "depth" above stands for that axis.

It works channels-last (NDHWC), the layout TensorFlow exports feed Conv3D through a Transpose:
the Transposes it puts around the 2D Conv are exactly the inverses of those ONNX Runtime adds
around its NHWC QLinearConv, and its first and last ones merge with the exporter's own
(`MergeTransposesPass`): what is left is at most one permutation of the Conv3D's input and
output when the folded axis is not depth.

Only stride 1, dilation 1, group 1 and static D/H/W are lowered; other Conv3Ds stay as they are.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, int_list, replace_nodes, uses_auto_pad


class FoldConv3DPass(FusionPass):
    def match(self, conv: ir.Node) -> bool | None:
        if conv.op_type != "Conv" or len(conv.inputs) < 2 or conv.inputs[1] is None or conv.inputs[1].const_value is None:
            return None
        x = conv.inputs[0]
        if len(conv.inputs[1].const_value.shape) != 5 or x.shape is None or len(x.shape) != 5:
            return None
        if any(not isinstance(d, int) for d in list(x.shape)[2:]) or uses_auto_pad(conv):
            return None
        plain = int_list(conv, "strides", [1, 1, 1]) == [1, 1, 1] and int_list(conv, "dilations", [1, 1, 1]) == [1, 1, 1]
        return True if plain and (conv.attributes["group"].value if "group" in conv.attributes else 1) == 1 else None

    def rewrite(self, graph: ir.Graph, conv: ir.Node, _) -> None:
        x, weight = conv.inputs[0], conv.inputs[1].const_value.numpy()
        spatial = list(x.shape)[2:]
        pads = int_list(conv, "pads", [0] * 6)
        axis = _fold_axis(pads)
        rest = [a for a in range(3) if a != axis]
        # Work in (N, A, R1, R2, C): the folded axis A first, the two 2D-conv axes R1, R2 after.
        order = [axis, *rest]
        k, c = weight.shape[:2]
        ka, kr1, kr2 = (weight.shape[2 + a] for a in order)
        a_size, r1, r2 = (spatial[a] for a in order)
        a_out = a_size + pads[axis] + pads[3 + axis] - ka + 1
        r_out = [spatial[a] + pads[a] + pads[3 + a] - weight.shape[2 + a] + 1 for a in rest]
        name = conv.name

        def const(suffix, array):
            return add_initializer(graph, f"{name}_{suffix}", np.asarray(array))

        def node(op, inputs, suffix, **attributes):
            attrs = [ir.AttrInt64s(key, v) if isinstance(v, list) else ir.AttrInt64(key, v) for key, v in attributes.items()]
            made = ir.Node("", op, inputs, attributes=attrs, name=f"{name}_{suffix}")
            chain.append(made)
            return made.outputs[0]

        chain: list[ir.Node] = []
        source = node("Transpose", [x], "channels_last", perm=[0, *(2 + a for a in order), 1])  # (N, A, R1, R2, C)
        if pads[axis] or pads[3 + axis]:
            source = node("Pad", [source, const("fold_pads", np.array([0, pads[axis], 0, 0, 0, 0, pads[3 + axis], 0, 0, 0], np.int64))], "pad_folded_axis")
        first = const("axis", np.array([1], np.int64))
        windows = [node("Slice", [source, const(f"start{i}", np.array([i], np.int64)), const(f"end{i}", np.array([i + a_out], np.int64)), first], f"window{i}")
                   for i in range(ka)]
        stacked = node("Concat", windows, "windows", axis=4)  # channel i*C + c
        flat = node("Reshape", [stacked, const("shape2d", np.array([-1, r1, r2, ka * c], np.int64))], "to_2d")
        nchw = node("Transpose", [flat], "to_nchw", perm=[0, 3, 1, 2])
        folded = weight.transpose(0, *(2 + a for a in order), 1).transpose(0, 1, 4, 2, 3).reshape(k, ka * c, kr1, kr2)
        conv2d = node("Conv", [nchw, const("weight2d", folded), *conv.inputs[2:3]], "2d",
                      pads=[pads[rest[0]], pads[rest[1]], pads[3 + rest[0]], pads[3 + rest[1]]], kernel_shape=[kr1, kr2])
        conv2d.producer().name = name  # it stands for the Conv3D: --exclude by the exported name still works
        nhwc = node("Transpose", [conv2d], "to_nhwc", perm=[0, 2, 3, 1])
        node("Reshape", [nhwc, const("shape3d", np.array([-1, a_out, *r_out, k], np.int64))], "to_3d")  # (N, A, R1, R2, K)
        back = [0] * 5  # (N, A, R1, R2, K) -> (N, K, D, H, W)
        back[1] = 4
        for position, a in enumerate(order, start=1):
            back[2 + a] = position
        result = ir.Node("", "Transpose", [chain[-1].outputs[0]], attributes=[ir.AttrInt64s("perm", back)], name=f"{name}_channels_first")
        for made in chain:
            graph.insert_before(conv, made)
        replace_nodes(graph, [conv], result)


def _fold_axis(pads: list[int]) -> int:
    """The spatial axis to fold: the first without padding (a folded axis needs an explicit
    Pad, which ORT runs in float), else depth."""
    return next((a for a in range(3) if pads[a] == 0 and pads[3 + a] == 0), 0)
