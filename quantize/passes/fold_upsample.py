"""Fold a nearest-neighbour upsampling into the Conv that reads it (sub-pixel convolution).

Keras exports UpSampling3D as chains of Unsqueeze/Tile/Reshape/Transpose, and the Conv after
it then reads every value f_d*f_h*f_w times. Output position o = f*q + phi of a Conv with kernel
k over x upsampled by f and padded by p reads x[q + (phi + t - p) // f] for tap t, so each
output phase phi is a Conv over x itself, whose taps are the sums of the original taps that
land on the same x position. One Conv over x with a (phase, channel) output per original
channel computes them all, and a pixel shuffle (Reshape, Transpose, Reshape, Slice) puts the
phases back in place: f_d*f_h*f_w times fewer positions, with kernels of about (k + f - 1) / f
taps per axis, and no upsampled tensor.

The chain is recognised by what it computes, not by its ops: data movement from a
channels-first tensor x to the Conv's input is run on a probe x of distinct values and must
equal x repeated f times per spatial axis and zero padded.
"""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from quantize.passes.rewrite import FusionPass, NodeChain, int_list, plain_conv3d, replace_nodes

MOVEMENT = {"Unsqueeze", "Squeeze", "Tile", "Reshape", "Transpose", "Pad", "Identity", "Expand"}
MAX_CHAIN_NODES = 64  # the movement and the shape arithmetic feeding it


class FoldUpsampleIntoConvPass(FusionPass):
    """Replaces nearest upsampling + Conv by one Conv over the small tensor and a pixel shuffle.

    The upsampling is recognised by running it on a probe, so any exporter's spelling matches;
    exact in FP32."""

    def match(self, conv: ir.Node) -> tuple[ir.Value, list[int], list[int], list[int]] | None:
        """(x, factors, pads before, pads after) when the Conv reads x upsampled and zero padded."""
        if not plain_conv3d(conv):
            return None
        x = _chain_source(conv.inputs[0])
        if (
            x is None
            or x.shape is None
            or len(x.shape) != 5
            or any(not isinstance(d, int) for d in list(x.shape)[1:])
        ):
            return None
        found = _probe_upsampling(conv.inputs[0], x)
        if found is None or found[0] == [1, 1, 1]:
            return None
        factors, before, after = found
        pads = int_list(conv, "pads", [0] * 6)
        return (
            x,
            factors,
            [b + p for b, p in zip(before, pads[:3])],
            [a + p for a, p in zip(after, pads[3:])],
        )

    def rewrite(self, graph: ir.Graph, conv: ir.Node, found) -> None:
        x, factors, before, after = found
        weight = conv.inputs[1].const_value.numpy()
        k, c = weight.shape[:2]
        sizes = list(x.shape)[2:]
        axes = [_PhaseAxis(*args) for args in zip(sizes, factors, before, after, weight.shape[2:])]
        name = conv.name

        chain = NodeChain(graph, name)
        const, node = chain.const, chain.node

        phases = int(np.prod(factors))
        bias = (
            [const("phase_bias", np.tile(conv.inputs[2].const_value.numpy(), phases))]
            if len(conv.inputs) > 2 and conv.inputs[2] is not None
            else []
        )
        kernel = np.einsum(
            "xet,yfu,zgv,mctuv->xyzmcefg", *(a.taps for a in axes), weight
        )  # (phases..., K, C, kernel...)
        phased = node(
            "Conv",
            [
                x,
                const(
                    "phase_weight",
                    kernel.reshape(phases * k, c, *kernel.shape[-3:]).astype(weight.dtype),
                ),
                *bias,
            ],
            "phases",
            kernel_shape=[a.kernel for a in axes],
            pads=[a.pad_before for a in axes] + [a.pad_after for a in axes],
        )
        phased.producer().name = name  # it stands for the Conv: --exclude and wide_outputs by the exported name still work
        q = [a.positions for a in axes]
        split = node(
            "Reshape",
            [phased, const("phase_split", np.array([-1, *factors, k, *q], np.int64))],
            "split_phases",
        )
        interleaved = node("Transpose", [split], "interleave_phases", perm=[0, 4, 5, 1, 6, 2, 7, 3])
        merged = node(
            "Reshape",
            [
                interleaved,
                const(
                    "phase_merge", np.array([-1, k, *(p * f for p, f in zip(q, factors))], np.int64)
                ),
            ],
            "merge_phases",
        )
        outputs = [a.outputs for a in axes]
        result = ir.Node(
            "",
            "Slice",
            [
                merged,
                const("crop_start", np.zeros(3, np.int64)),
                const("crop_end", np.array(outputs, np.int64)),
                const("crop_axes", np.array([2, 3, 4], np.int64)),
            ],
            name=f"{name}_crop",
        )
        for made in chain.nodes:
            graph.insert_before(conv, made)
        replace_nodes(graph, [conv], result)


class _PhaseAxis:
    """One spatial axis: x of `size` upsampled by `factor`, padded, read by a kernel of `taps` taps."""

    def __init__(self, size: int, factor: int, before: int, after: int, taps: int):
        self.outputs = factor * size + before + after - taps + 1
        low, high = -before // factor, (factor - 1 + taps - 1 - before) // factor
        self.kernel = high - low + 1
        self.pad_before = -low
        needed = -(
            -self.outputs // factor
        )  # positions per phase; any beyond are cropped after the shuffle
        self.pad_after = max(0, needed - size - self.pad_before + self.kernel - 1)
        self.positions = size + self.pad_before + self.pad_after - self.kernel + 1
        # taps[phi, e, t]: original tap t of output phase phi lands on x position q + low + e
        self.taps = np.zeros((factor, self.kernel, taps), np.float64)
        for phi in range(factor):
            for t in range(taps):
                self.taps[phi, (phi + t - before) // factor - low, t] = 1.0


def _chain_source(value: ir.Value) -> ir.Value | None:
    """The tensor a chain of data movement starts from, or None if there is no movement."""
    source = value
    while source.producer() is not None and source.producer().op_type in MOVEMENT:
        source = source.producer().inputs[0]
    return None if source is value else source


def _probe_upsampling(end: ir.Value, x: ir.Value) -> tuple[list[int], list[int], list[int]] | None:
    """(factors, pads before, pads after) if the subgraph from x to `end` repeats x along each
    spatial axis and pads it with zeros, found by running it on distinct values."""
    model = _subgraph(end, x)
    if model is None:
        return None
    probe = (1 + np.arange(2 * int(np.prod(x.shape[1:])), dtype=np.float32)).reshape(
        2, *x.shape[1:]
    )  # two: a chain must not mix the batch
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    try:
        got = ort.InferenceSession(
            ir.serde.serialize_model(model).SerializeToString(),
            options,
            providers=["CPUExecutionProvider"],
        ).run(None, {x.name: probe})[0]
    except Exception:  # noqa: BLE001 - a chain ORT cannot run on its own is simply not folded
        return None
    if got.ndim != 5 or got.shape[:2] != probe.shape[:2]:
        return None
    factors, before, after = [], [], []
    for axis in range(2, 5):
        hit = np.flatnonzero(np.any(got != 0, axis=tuple(a for a in range(5) if a != axis)))
        if len(hit) == 0 or len(hit) != hit[-1] - hit[0] + 1 or len(hit) % probe.shape[axis]:
            return None
        factors.append(len(hit) // probe.shape[axis])
        before.append(int(hit[0]))
        after.append(got.shape[axis] - int(hit[-1]) - 1)
    expected = probe
    for axis, f in zip(range(2, 5), factors):
        expected = np.repeat(expected, f, axis=axis)
    expected = np.pad(expected, [(0, 0), (0, 0), *zip(before, after)])
    return (factors, before, after) if np.array_equal(got, expected) else None


def _subgraph(end: ir.Value, x: ir.Value) -> ir.Model | None:
    """The nodes computing `end` from x and constants, copied into a model of their own; None
    if it needs more."""
    nodes, constants, pending, seen = [], {}, [end], set()
    while pending:
        value = pending.pop()
        if value is x or value.name in seen:
            continue
        seen.add(value.name)
        if value.const_value is not None:
            constants[value.name] = value.const_value
            continue
        producer = value.producer()
        if producer is None or len(nodes) >= MAX_CHAIN_NODES:
            return None
        if producer not in nodes:
            nodes.append(producer)
            pending += [v for v in producer.inputs if v is not None]
    copies = {
        x.name: ir.Value(
            name=x.name, shape=ir.Shape(["N", *x.shape[1:]]), type=ir.TensorType(ir.DataType.FLOAT)
        )
    }
    initializers = []
    for name, tensor in constants.items():
        copies[name] = ir.Value(
            name=name,
            shape=ir.Shape(tensor.shape),
            type=ir.TensorType(tensor.dtype),
            const_value=tensor,
        )
        initializers.append(copies[name])
    copied_nodes = []
    for node in _topological(nodes, {x.name, *constants}):
        inputs = [None if v is None else copies[v.name] for v in node.inputs]
        copy = ir.Node(
            node.domain,
            node.op_type,
            inputs,
            attributes=list(node.attributes.values()),
            num_outputs=len(node.outputs),
            name=node.name,
        )
        for old, new in zip(node.outputs, copy.outputs):
            new.name = old.name
            copies[old.name] = new
        copied_nodes.append(copy)
    copies[end.name].type = ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph(
        [copies[x.name]],
        [copies[end.name]],
        nodes=copied_nodes,
        initializers=initializers,
        opset_imports={"": 17},
        name="probe",
    )
    return ir.Model(graph, ir_version=8)


def _topological(nodes: list[ir.Node], available: set[str]) -> list[ir.Node]:
    ordered, pending = [], list(nodes)
    while pending:
        ready = [n for n in pending if all(v is None or v.name in available for v in n.inputs)]
        ordered += ready
        available |= {v.name for n in ready for v in n.outputs}
        pending = [n for n in pending if n not in ready]
    return ordered
