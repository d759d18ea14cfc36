"""Building blocks of graph rewrites: constants, node replacement, and a match-rewrite pass."""

import numpy as np
import onnx_ir as ir

FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def add_initializer(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    """A new initializer named `name`, or `name_K` if a folding before took that name."""
    taken, stem, count = graph.initializers, name, 0
    while name in taken:
        count += 1
        name = f"{stem}_{count}"
    # ir.Tensor, not the ir.tensor wrapper: its protocol checks are paid per constant, and a
    # lowering adds hundreds of constants
    value = ir.Value(name=name, const_value=ir.Tensor(np.asarray(array), name=name))
    value.shape, value.type = value.const_value.shape, ir.TensorType(value.const_value.dtype)
    graph.register_initializer(value)
    return value


def int_list(node: ir.Node, name: str, default: list[int]) -> list[int]:
    """An INTS attribute of `node`, or `default` when it is absent."""
    return list(node.attributes[name].value) if name in node.attributes else default


def transpose_perm(node: ir.Node | None) -> list[int] | None:
    """The permutation of a Transpose node with an explicit perm; None for any other node."""
    if node is None or node.op_type != "Transpose" or "perm" not in node.attributes:
        return None
    return list(node.attributes["perm"].value)


def uses_auto_pad(node: ir.Node) -> bool:
    return "auto_pad" in node.attributes and node.attributes["auto_pad"].value not in ("NOTSET", "")


def read_once(value: ir.Value) -> bool:
    """Is `value` read by exactly one node and not a graph output (free to fold away)?"""
    return len(value.uses()) == 1 and not value.is_graph_output()


def replace_nodes(graph: ir.Graph, old: list[ir.Node], new: ir.Node) -> None:
    """Put `new` in place of the chain `old`; it takes over the last node's output and name."""
    last = old[-1].outputs[0]
    graph.insert_after(old[-1], new)
    new.outputs[0].name, new.outputs[0].type, new.outputs[0].shape = (
        last.name,
        last.type,
        last.shape,
    )
    last.name = None
    ir.convenience.replace_all_uses_with(last, new.outputs[0], replace_graph_outputs=True)
    graph.remove(old, safe=True)


def per_tensor_dequantizer(value: ir.Value | None) -> ir.Node | None:
    """The DequantizeLinear that makes `value`, if it has one constant scale and zero point."""
    dq = value.producer() if value is not None else None
    if dq is None or dq.op_type != "DequantizeLinear" or len(dq.inputs) != 3:
        return None
    if any(v.const_value is None or v.const_value.size != 1 for v in dq.inputs[1:]):
        return None
    return dq


def integer_weights_and_bias(conv: ir.Node) -> bool:
    """Does `conv` read dequantized constant weights and a dequantized constant bias?"""
    return len(conv.inputs) == 3 and all(_reads_dequantized_constant(v) for v in conv.inputs[1:])


def integer_weights(conv: ir.Node) -> bool:
    """Does `conv` read dequantized constant weights?"""
    return len(conv.inputs) > 1 and _reads_dequantized_constant(conv.inputs[1])


def _reads_dequantized_constant(value: ir.Value | None) -> bool:
    producer = value.producer() if value is not None else None
    return (
        producer is not None
        and producer.op_type == "DequantizeLinear"
        and producer.inputs[0].const_value is not None
    )


def dequantized(dequantize: ir.Node) -> np.ndarray:
    """What a DequantizeLinear of constants yields, in float64: per tensor, or per slice along
    its axis."""
    q, scale, *zero_point = (v.const_value.numpy() for v in dequantize.inputs)
    axis = dequantize.attributes["axis"].value if "axis" in dequantize.attributes else 1
    shape = [1] * q.ndim
    if scale.size > 1:
        shape[axis] = -1
    zero = zero_point[0].reshape(shape) if zero_point else 0
    return (q.astype(np.float64) - zero) * scale.reshape(shape)


def weight_sums(node: ir.Node) -> np.ndarray:
    """The sum of `node`'s dequantized weights per output channel (it has `integer_weights`):
    a Conv's per filter, a Gemm's per column of its B."""
    weights = dequantized(node.inputs[1].producer())
    if node.op_type == "Gemm" and not node.attributes.get_int("transB", 0):
        weights = weights.T
    return weights.sum(axis=tuple(range(1, weights.ndim)))


def raised_bias(conv: ir.Node, amount: float) -> np.ndarray:
    """The int32 bias of `conv` (which has `integer_weights_and_bias`), as int64, raised by
    `amount` * sum(W) per output channel: its output as if every input element were `amount`
    higher."""
    q_bias, scale = (v.const_value.numpy() for v in conv.inputs[2].producer().inputs[:2])
    raise_by = np.round(amount * weight_sums(conv) / scale.astype(np.float64))
    return q_bias.astype(np.int64) + raise_by.astype(np.int64)


def set_bias(graph: ir.Graph, conv: ir.Node, q_bias: np.ndarray, name: str) -> None:
    """`conv`'s int32 bias made `q_bias` (at its scale), as a new initializer `name`."""
    conv.inputs[2].producer().replace_input_with(0, add_initializer(graph, name, q_bias))


class NodeChain:
    """New nodes and constants, named after the node they stand for, collected in order."""

    def __init__(self, graph: ir.Graph, name: str):
        self.graph, self.name, self.nodes = graph, name, []

    def const(self, suffix: str, array) -> ir.Value:
        return add_initializer(self.graph, f"{self.name}_{suffix}", np.asarray(array))

    def node(self, op: str, inputs: list, suffix: str, **attributes) -> ir.Value:
        attrs = [
            ir.AttrInt64s(key, v)
            if isinstance(v, list)
            else ir.AttrString(key, v)
            if isinstance(v, str)
            else ir.AttrInt64(key, v)
            for key, v in attributes.items()
        ]
        made = ir.Node("", op, inputs, attributes=attrs, name=f"{self.name}_{suffix}")
        self.nodes.append(made)
        return made.outputs[0]


def read_by_fp32_only(node: ir.Node, planned: set[str]) -> ir.Value:
    """The dequantized output of `node`, checked to be read by FP32 ops only: a second INT8
    result is added to it in float."""
    output = dequantized_output(node).outputs[0]
    readers = [user.name for user, _ in output.uses() if user.name in planned]
    if readers or output.is_graph_output():
        raise ir.passes.PreconditionError(
            f"{node.name}: its output must be read by FP32 ops only, not {readers or 'the graph output'}"
        )
    return output


def dequantized_output(node: ir.Node) -> ir.Node:
    """The DequantizeLinear of the Q -> DQ pair that InsertQDQPass put on a node's output."""
    users = [user for user, _ in node.outputs[0].uses()]
    if len(users) != 1 or users[0].op_type != "QuantizeLinear":
        raise ir.passes.PreconditionError(
            f"{node.name}: its output is not quantized by one QuantizeLinear"
        )
    dequantizers = [user for user, _ in users[0].outputs[0].uses()]
    if len(dequantizers) != 1 or dequantizers[0].op_type != "DequantizeLinear":
        raise ir.passes.PreconditionError(
            f"{node.name}: its quantized output is not read by one DequantizeLinear"
        )
    return dequantizers[0]


def own_weights(graph: ir.Graph, conv: ir.Node, name: str) -> ir.Node:
    """A DequantizeLinear named `name`_weight_DequantizeLinear of its own copies of the int8
    weights and zero point `conv` reads, for a second Conv on the same weights. ORT converts int8
    weights to uint8 for its exact kernels on a saturating CPU (session.x64quantprecision) once
    per reader, under a name made from the weights', and fails at the second reader of shared
    ones."""
    shared = conv.inputs[1].producer()
    if shared is None or shared.op_type != "DequantizeLinear":
        raise ir.passes.PreconditionError(f"{conv.name}: its weights are not dequantized int8")
    weights, scale, *zero_point = shared.inputs
    copies = [
        add_initializer(graph, f"{name}_weight_quantized", weights.const_value.numpy()),
        scale,
        *(
            add_initializer(graph, f"{name}_weight_zero_point", z.const_value.numpy())
            for z in zero_point
        ),
    ]
    dequantize = ir.Node(
        "",
        "DequantizeLinear",
        copies,
        attributes=list(shared.attributes.values()),
        name=f"{name}_weight_DequantizeLinear",
    )
    output = dequantize.outputs[0]
    output.name, output.type, output.shape = (
        dequantize.name,
        conv.inputs[1].type,
        conv.inputs[1].shape,
    )
    return dequantize


def copied_in_nhwc(
    chain: NodeChain, dequantized: ir.Value, steps: list[tuple[str, list[ir.Value]]]
) -> ir.Value:
    """`dequantized`, an NCHW DequantizeLinear's output, transposed to NHWC and moved through
    `steps` (op, operands after the data), as NHWC data: each step is a copy, quantized at the
    DequantizeLinear's scale (exact), so ONNX Runtime runs it on uint8. The caller transposes
    the result back to NCHW; ORT's transpose optimizer cancels both Transposes against the
    layout Transposes of the NHWC integer kernels around."""
    _, scale, zero_point = dequantized.producer().inputs

    def exact(value: ir.Value, suffix: str) -> ir.Value:
        quantized = chain.node("QuantizeLinear", [value, scale, zero_point], f"q_{suffix}")
        value = chain.node("DequantizeLinear", [quantized, scale, zero_point], f"dq_{suffix}")
        value.type = dequantized.type
        return value

    value = exact(chain.node("Transpose", [dequantized], "to_nhwc", perm=TO_NHWC), "nhwc")
    for op, operands in steps:
        value = exact(chain.node(op, [value, *operands], op.lower()), op.lower())
    return value


def nhwc_shape(chain: NodeChain, value: ir.Value, factors: list[int]) -> ir.Value:
    """The NHWC shape of the NCHW `value` with its axes multiplied by `factors`, computed in the
    graph (the model may take any batch and image size)."""
    scaled = chain.node("Shape", [value], "shape")
    if any(f != 1 for f in factors):
        multiples = chain.const("factors", np.array(factors, np.int64))
        scaled = chain.node("Mul", [scaled, multiples], "scaled_shape")
    return chain.node(
        "Gather",
        [scaled, chain.const("nhwc_order", np.array(TO_NHWC, np.int64))],
        "nhwc_shape",
        axis=0,
    )


class FusionPass(ir.passes.InPlacePass):
    """Rewrites every node for which `match` finds a pattern; subclasses say what and how."""

    def match(self, node: ir.Node):
        raise NotImplementedError

    def rewrite(self, graph: ir.Graph, node: ir.Node, found) -> None:
        raise NotImplementedError

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        count = 0
        for node in list(model.graph):
            found = self.match(node)
            if found is not None:
                self.rewrite(model.graph, node, found)
                count += 1
        return ir.passes.PassResult(model, modified=count > 0)


def channel_vector(value: ir.Value, channels: int, rank: int) -> np.ndarray | None:
    """A constant that broadcasts against a rank-`rank` NC... tensor along its channels only,
    as one float64 factor per channel; None for any other value."""
    if value.const_value is None or value.const_value.dtype not in FLOATS:
        return None
    array = value.const_value.numpy().astype(np.float64)
    if array.ndim > rank:
        return None
    shape = (1,) * (rank - array.ndim) + array.shape
    if any(size != 1 for axis, size in enumerate(shape) if axis != 1) or shape[1] not in (
        1,
        channels,
    ):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,)).copy()


def constant_weights(conv: ir.Node) -> bool:
    """Are the Conv's weights constant, and its bias constant or absent?"""
    weight = conv.inputs[1]
    return weight is not None and weight.const_value is not None and conv_bias(conv) is not None


def plain_conv3d(conv: ir.Node) -> bool:
    """A Conv3D with constant weights, a constant bias or none, explicit pads, stride 1,
    dilation 1 and one group: what the Conv3D folding passes rewrite."""
    return (
        conv.op_type == "Conv"
        and len(conv.inputs) >= 2
        and constant_weights(conv)
        and len(conv.inputs[1].const_value.shape) == 5
        and not uses_auto_pad(conv)
        and int_list(conv, "strides", [1] * 3) == [1] * 3
        and int_list(conv, "dilations", [1] * 3) == [1] * 3
        and conv.attributes.get_int("group", 1) == 1
    )


def conv_bias(conv: ir.Node) -> np.ndarray | None:
    """The Conv's (or ConvTranspose's) bias as a float64 array (zeros when it has none); None if
    it is not constant."""
    if len(conv.inputs) < 3 or conv.inputs[2] is None:
        return np.zeros(output_channels(conv))
    bias = conv.inputs[2].const_value
    return None if bias is None else bias.numpy().astype(np.float64)


def output_channels(conv: ir.Node) -> int:
    """A Conv's weights are (out, in / group, ...), a ConvTranspose's (in, out / group, ...)."""
    shape = conv.inputs[1].const_value.shape
    if conv.op_type == "ConvTranspose":
        return shape[1] * conv.attributes.get_int("group", 1)
    return shape[0]


def conv_with(
    graph: ir.Graph, conv: ir.Node, x: ir.Value, weight: np.ndarray, bias: np.ndarray, tag: str
) -> ir.Node:
    """A copy of `conv` (same op, name and attributes) that reads `x` with these weights and
    bias, in the dtype of its weights; not yet in the graph."""
    dtype = conv.inputs[1].const_value.dtype.numpy()
    w_value = add_initializer(graph, f"{conv.name}_{tag}_weight", weight.astype(dtype))
    b_value = add_initializer(graph, f"{conv.name}_{tag}_bias", bias.astype(dtype))
    return ir.Node(
        "", conv.op_type, [x, w_value, b_value], attributes=conv.attributes.values(), name=conv.name
    )
