"""Lower Conv3D to a 2D Conv by folding the kernel's depth into channels.

ONNX Runtime's INT8 3D convolution is slower than its FP32 one; its 2D QLinearConv is fast.
For X (N, C, D, H, W) and a kernel (kd, kh, kw), output depth d needs input depths d..d+kd-1.
Output depths are taken s at a time: window w holds the kd+s-1 input depths that outputs
w*s..w*s+s-1 read, concatenated as channels; windows move into the batch, and one 2D Conv
with weights (s*K, (kd+s-1)*C, kh, kw) (output j of a window reads positions j..j+kd-1, zeros
elsewhere) computes s output depths per window as channels:

    Pad(D) -> Slice(step s) x (kd+s-1) -> Concat(channels) -> Reshape(N*D/s, H, W, (kd+s-1)*C)
    -> Transpose(NCHW) -> Conv2D -> Transpose(NHWC) -> [Reshape, Transpose: windows' outputs
    back in depth order] -> Reshape(N, Do, Ho, Wo, K) -> Transpose(N, K, Do, Ho, Wo)

s > 1 is for convolutions with few output channels (the 3DGAN's have 6 and 1): the GEMM
kernel computes output channels in blocks of 16, so K=6 fills 6/16 of its work, and s*K fills
more for (kd+s-1)/kd times the multiply-adds; `outputs_per_window` picks s by that cost.

The folded axis is the first one without padding when there is one (so no Pad is needed and
the padding stays the 2D Conv's own); "depth" above stands for that axis.

It works channels-last (NDHWC), the layout TensorFlow exports feed Conv3D through a Transpose:
the Transposes it puts around the 2D Conv are exactly the inverses of those ONNX Runtime adds
around its NHWC QLinearConv, and its first and last ones merge with the exporter's own
(`MergeTransposesPass`): what is left is at most one permutation of the Conv3D's input and
output when the folded axis is not depth.

Only stride 1, dilation 1, group 1, a constant bias and static D/H/W are lowered; other Conv3Ds stay as they are.
"""

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, NodeChain, int_list, plain_conv3d, replace_nodes

CHANNEL_BLOCK = 16  # output channels per block of ORT's (MLAS) GEMM kernels


class FoldConv3DPass(FusionPass):
    """Rewrites a Conv3D as a 2D Conv over windows of the folded axis (see the module docstring).

    Only stride 1, dilation 1, group 1, constant weights and bias and static D/H/W; exact in FP32."""

    def match(self, conv: ir.Node) -> bool | None:
        if not plain_conv3d(conv):
            return None
        x = conv.inputs[0]
        if x.shape is None or len(x.shape) != 5:
            return None
        return True if all(isinstance(d, int) for d in list(x.shape)[2:]) else None

    def outputs_per_window(self, k: int, ka: int, a_out: int) -> int:
        """The divisor s of a_out with the least estimated GEMM work: the kernel computes output
        channels in blocks of 16, so s*K channels are paid as a whole number of blocks, and a
        window of ka+s-1 input positions makes (ka+s-1)/ka times the multiply-adds (zeros)."""

        def cost(s: int) -> float:
            return (ka + s - 1) / ka * -(-s * k // CHANNEL_BLOCK) * CHANNEL_BLOCK / (s * k)

        return min((s for s in range(1, a_out + 1) if a_out % s == 0), key=cost)

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
        a_out = spatial[axis] + pads[axis] + pads[3 + axis] - ka + 1
        r_out = [spatial[a] + pads[a] + pads[3 + a] - weight.shape[2 + a] + 1 for a in rest]
        group = self.outputs_per_window(k, ka, a_out)
        windows, span = (
            a_out // group,
            ka + group - 1,
        )  # window w covers input positions w*group .. w*group+span-1
        name = conv.name

        chain = NodeChain(graph, name)
        const, node = chain.const, chain.node

        source = node(
            "Transpose", [x], "channels_last", perm=[0, *(2 + a for a in order), 1]
        )  # (N, A, R1, R2, C)
        if pads[axis] or pads[3 + axis]:
            source = node(
                "Pad",
                [
                    source,
                    const(
                        "fold_pads",
                        np.array([0, pads[axis], 0, 0, 0, 0, pads[3 + axis], 0, 0, 0], np.int64),
                    ),
                ],
                "pad_folded_axis",
            )
        first, step = (
            const("axis", np.array([1], np.int64)),
            const("step", np.array([group], np.int64)),
        )
        # Slice i holds input position w*group + i of every window w: (N, windows, R1, R2, C).
        shifted = [
            node(
                "Slice",
                [
                    source,
                    const(f"start{i}", np.array([i], np.int64)),
                    const(f"end{i}", np.array([i + (windows - 1) * group + 1], np.int64)),
                    first,
                    step,
                ],
                f"window{i}",
            )
            for i in range(span)
        ]
        stacked = node("Concat", shifted, "windows", axis=4)  # channel i*C + c
        flat = node(
            "Reshape",
            [
                stacked,
                const("shape2d", np.array([-1, *(spatial[a] for a in rest), span * c], np.int64)),
            ],
            "to_2d",
        )
        nchw = node("Transpose", [flat], "to_nchw", perm=[0, 3, 1, 2])
        bias = list(conv.inputs[2:3])
        if group > 1 and bias and bias[0] is not None:
            bias = [
                const("bias2d", np.tile(bias[0].const_value.numpy(), group))
            ]  # output j*K + k has bias k
        conv2d = node(
            "Conv",
            [nchw, const("weight2d", _window_weight(weight, order, group)), *bias],
            "2d",
            pads=[pads[rest[0]], pads[rest[1]], pads[3 + rest[0]], pads[3 + rest[1]]],
            kernel_shape=[kr1, kr2],
        )
        conv2d.producer().name = (
            name  # it stands for the Conv3D: --exclude by the exported name still works
        )
        nhwc = node(
            "Transpose", [conv2d], "to_nhwc", perm=[0, 2, 3, 1]
        )  # (N*windows, R1o, R2o, group*K)
        if group > 1:
            split = node(
                "Reshape",
                [nhwc, const("shape_groups", np.array([-1, windows, *r_out, group, k], np.int64))],
                "split_groups",
            )
            nhwc = node(
                "Transpose", [split], "merge_groups", perm=[0, 1, 4, 2, 3, 5]
            )  # (N, windows, group, R1o, R2o, K)
        node(
            "Reshape", [nhwc, const("shape3d", np.array([-1, a_out, *r_out, k], np.int64))], "to_3d"
        )  # (N, A, R1, R2, K)
        back = [0] * 5  # (N, A, R1, R2, K) -> (N, K, D, H, W)
        back[1] = 4
        for position, a in enumerate(order, start=1):
            back[2 + a] = position
        result = ir.Node(
            "",
            "Transpose",
            [chain.nodes[-1].outputs[0]],
            attributes=[ir.AttrInt64s("perm", back)],
            name=f"{name}_channels_first",
        )
        for made in chain.nodes:
            graph.insert_before(conv, made)
        replace_nodes(graph, [conv], result)


def _window_weight(weight: np.ndarray, order: list[int], group: int) -> np.ndarray:
    """2D weights (group*K, span*C, kr1, kr2): output j of a window reads window positions j..j+ka-1."""
    k, c = weight.shape[:2]
    folded = weight.transpose(
        0, 2 + order[0], 1, 2 + order[1], 2 + order[2]
    )  # (K, ka, C, kr1, kr2)
    ka, kernel_2d = folded.shape[1], folded.shape[3:]
    out = np.zeros((group, k, ka + group - 1, c, *kernel_2d), weight.dtype)
    for j in range(group):
        out[j, :, j : j + ka] = folded
    return out.reshape(group * k, (ka + group - 1) * c, *kernel_2d)


def _fold_axis(pads: list[int]) -> int:
    """The spatial axis to fold: the first without padding (a folded axis needs an explicit
    Pad, which ORT runs in float), else depth."""
    return next((a for a in range(3) if pads[a] == 0 and pads[3 + a] == 0), 0)
