"""Fuse attention written out op by op into ONNX Runtime's com.microsoft MultiHeadAttention.

Exporters write scaled dot-product attention as a dozen nodes per layer (the Hugging Face BERT
exports of torch.onnx, TorchScript and dynamo alike):

    q4 = Transpose(Reshape(q, [B, S, H, D]))          (B, H, S, D)   and k4 (B, H, D, T), v4
    p = Softmax(q4 * a @ k4 * b + bias)               the scale as two Muls or one after
    p = Where(IsNaN(p), 0, p)                         a NaN guard (optional)
    out = Reshape(Transpose(p @ v4), [B, S, H * D])

ORT's transformer optimizer does not match these forms (the scale split over Q and K, the
guard, dynamo's K transposed through rank-3 Reshapes), so ORT runs every node; its
MultiHeadAttention kernel does the same work in one. The pass is for ONNX Runtime only (the
op is ORT's), and in the clean-up, so the FP32 baseline gets it too. The Reshape/Transpose
chains are checked by replaying them on a small array with the inferred shapes: a chain that
does not move the elements as the pattern needs is left alone.

The one difference: for a query whose every key is masked with -inf (only an input made of
nothing but padding has one) the guard wrote zeros, and the fused op, whose bias is clamped to
the float32 minimum, writes the mean of the values.
"""

import math

import numpy as np
import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, NodeChain, transpose_perm

MOVES = {"Reshape", "Transpose"}
# concrete sizes standing for the batch and sequence dims when a chain is replayed
TRIAL_SIZES = (2, 3)


class FuseAttentionPass(FusionPass):
    """Replaces each written-out scaled dot-product attention, rooted at its Softmax, by one
    com.microsoft MultiHeadAttention reading the projected Q, K and V."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        result = super().call(model)
        if result.modified:
            model.opset_imports.setdefault("com.microsoft", 1)
        return result

    def match(self, softmax: ir.Node):
        if softmax.op_type != "Softmax" or not _last_axis(softmax):
            return None
        scores, bias = _scores_and_bias(softmax.inputs[0])
        if scores is None:
            return None
        scale, product = _scaled(scores)
        if product is None or product.op_type != "MatMul":
            return None
        q_scale, q4 = _scaled(product.inputs[0])
        k_scale, k4 = _scaled(product.inputs[1])
        context = _context_matmul(softmax)
        if q4 is None or k4 is None or context is None:
            return None
        found = _projections(q4, k4, context.inputs[1].producer(), context)
        if found is None or bias is not None and _rank(bias) != 4 or not _is_float32(softmax):
            return None
        q, k, v, out, heads = found
        return q, k, v, bias, out, heads, scale * q_scale * k_scale

    def rewrite(self, graph: ir.Graph, softmax: ir.Node, found) -> None:
        q, k, v, bias, out, heads, scale = found
        chain = NodeChain(graph, softmax.name)
        inputs = [q, k, v]
        if bias is not None:
            spans = _spans(bias, q, k)
            floor = chain.const("bias_floor", np.float32(np.finfo(np.float32).min))
            bias = chain.node("Max", [bias, floor], "bias_finite")
            inputs += [None, None, bias if spans else _expanded(chain, bias, q, k)]
        fused = ir.Node(
            "com.microsoft",
            "MultiHeadAttention",
            inputs,
            attributes=[ir.AttrInt64("num_heads", heads), ir.AttrFloat32("scale", scale)],
            name=f"{softmax.name}_attention",
        )
        for node in [*chain.nodes, fused]:
            graph.insert_before(out.producer(), node)
        fused.outputs[0].type, fused.outputs[0].shape = out.type, out.shape
        ir.convenience.replace_all_uses_with(out, fused.outputs[0], replace_graph_outputs=True)
        if out.is_graph_output():
            fused.outputs[0].name, out.name = out.name, None
        # the written-out nodes are now dead; the clean-up's RemoveUnusedNodesPass drops them


def _last_axis(softmax: ir.Node) -> bool:
    axis = softmax.attributes["axis"].value if "axis" in softmax.attributes else -1
    return axis in (-1, 3) and _rank(softmax.inputs[0]) == 4


def _is_float32(node: ir.Node) -> bool:
    return node.outputs[0].dtype == ir.DataType.FLOAT


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else len(value.shape)


def _scores_and_bias(value: ir.Value):
    """(the scaled scores, the additive bias or None) that a Softmax reads."""
    node = value.producer()
    if node is not None and node.op_type == "Add":
        for scores, bias in (node.inputs, reversed(node.inputs)):
            producer = scores.producer()
            if producer is not None and producer.op_type in ("MatMul", "Mul", "Div"):
                return scores, bias
        return None, None
    return value, None


def _scaled(value: ir.Value) -> tuple[float, ir.Node | None]:
    """(the scalar constant `value` multiplies its source by, that source's producer): 1 and the
    producer itself where `value` is no Mul or Div by a scalar constant."""
    node = value.producer()
    if node is None or node.op_type not in ("Mul", "Div"):
        return 1.0, node
    constant = node.inputs[1].const_value
    if constant is None or constant.numpy().size != 1:
        return 1.0, None
    factor = float(constant.numpy().reshape(()))
    return (factor if node.op_type == "Mul" else 1 / factor), node.inputs[0].producer()


def _context_matmul(softmax: ir.Node) -> ir.Node | None:
    """The MatMul that reads the probabilities, through the NaN guard if there is one."""
    probs = softmax.outputs[0]
    readers = {u.op_type: u for u, _ in probs.uses()}
    if len(probs.uses()) == 2 and set(readers) == {"IsNaN", "Where"}:
        guard = readers["Where"]
        zero = guard.inputs[1].const_value
        if (
            guard.inputs[0] is not readers["IsNaN"].outputs[0]
            or guard.inputs[2] is not probs
            or zero is None
            or np.any(zero.numpy() != 0)
        ):
            return None
        probs = guard.outputs[0]
    users = [u for u, _ in probs.uses()]
    if len(users) != 1 or users[0].op_type != "MatMul" or users[0].inputs[0] is not probs:
        return None
    return users[0]


SPLIT = (0, 2, 1, 3)  # (B, S, H, D) -> (B, H, S, D): Q and V; also the context's merge back
SPLIT_TRANSPOSED = (0, 2, 3, 1)  # (B, S, H, D) -> (B, H, D, S): K


def _projections(q4: ir.Node, k4: ir.Node, v4: ir.Node | None, context: ir.Node):
    """(q, k, v as (B, S, H*D), the (B, S, H*D) output the context becomes, the head count)
    where the chains of moves from q, k, v and to the output split and merge the heads as
    attention does; else None."""
    head_size = _static_dim(context.outputs[0], 3, rank=4)
    if v4 is None or head_size is None:
        return None
    q = _split_source(q4.outputs[0], head_size, SPLIT)
    if q is None:
        return None
    hidden = q.shape[2]
    k = _split_source(k4.outputs[0], head_size, SPLIT_TRANSPOSED, hidden)
    v = _split_source(v4.outputs[0], head_size, SPLIT, hidden)
    out = _merged_destination(context.outputs[0], q, hidden // head_size, head_size)
    if k is None or v is None or out is None or _rows(k) != _rows(v):
        return None
    return q, k, v, out, hidden // head_size


def _rows(value: ir.Value) -> list[str]:
    """A (B, S, ..) value's batch and sequence dims, as shape inference names them."""
    return [str(d) for d in value.shape[:2]]


def _static_dim(value: ir.Value, axis: int, rank: int) -> int | None:
    if _rank(value) != rank or not isinstance(value.shape[axis], int):
        return None
    return value.shape[axis]


def _split_source(
    value: ir.Value, head_size: int, perm: tuple[int, ...], hidden: int | None = None
) -> ir.Value | None:
    """The nearest (B, S, hidden) value up the chain of Reshapes and Transposes that makes
    `value`, such that the chain splits its heads of `head_size` and transposes them by `perm`
    (`hidden`: any multiple of `head_size`, if None)."""
    moves: list[ir.Node] = []
    node = value.producer()
    while node is not None and node.op_type in MOVES:
        moves.insert(0, node)
        source = node.inputs[0]
        width = _static_dim(source, 2, rank=3)
        if width is not None and width % head_size == 0 and hidden in (None, width):
            rows = _trial_rows(source)
            start = np.arange(math.prod(rows) * width).reshape(*rows, width)
            wanted = start.reshape(*rows, width // head_size, head_size).transpose(perm)
            if _replays_to(moves, start, wanted):
                return source
        node = source.producer()
    return None


def _merged_destination(
    context: ir.Value, q: ir.Value, heads: int, head_size: int
) -> ir.Value | None:
    """The (B, S, H*D) value down the chain of Reshapes and Transposes, each the one mover
    reading the one before, that merges the heads of `context` (B, H, S, D) back."""
    b, s = _trial_rows(q)
    query_dims = {str(d): r for d, r in zip(q.shape[:2], (b, s)) if not isinstance(d, int)}
    moves = []
    start = np.arange(b * heads * s * head_size).reshape(b, heads, s, head_size)
    wanted = start.transpose(SPLIT).reshape(b, s, heads * head_size)
    value = context
    while not value.is_graph_output():
        movers = [u for u, _ in value.uses() if u.op_type in MOVES and u.inputs[0] is value]
        if len(movers) != 1:
            return None
        moves.append(movers[0])
        value = movers[0].outputs[0]
        if _rank(value) == 3 and _replays_to(moves, start, wanted, query_dims):
            return value
    return None


def _trial_rows(value: ir.Value) -> tuple[int, int]:
    """A (B, S, ..) value's batch and sequence sizes for a replay: static ones as they are."""
    return tuple(d if isinstance(d, int) else t for d, t in zip(value.shape[:2], TRIAL_SIZES))


def _replays_to(
    moves: list[ir.Node], start: np.ndarray, wanted: np.ndarray, sizes: dict | None = None
) -> bool:
    """Do the `moves`, replayed on `start`, give `wanted`? Each Reshape takes its inferred output
    shape: a symbolic dim at its size in `sizes` or in an input before (shape inference names a
    dim alike wherever it knows the sizes equal), one other dim at most, from the element count."""
    array, sizes = start, dict(sizes or {})
    for node in moves:
        dims = node.inputs[0].shape
        if dims is None or len(dims) != array.ndim:
            return False
        for dim, size in zip(dims, array.shape):
            known = dim if isinstance(dim, int) else sizes.setdefault(str(dim), size)
            if known != size:
                return False
        if node.op_type == "Transpose":
            perm = transpose_perm(node)
            if perm is None:
                return False
            array = array.transpose(perm)
            continue
        shape = _concrete(node.outputs[0], array.size, sizes)
        if shape is None:
            return False
        array = array.reshape(shape)
    return array.shape == wanted.shape and np.array_equal(array, wanted)


def _concrete(value: ir.Value, size: int, sizes: dict) -> tuple[int, ...] | None:
    if value.shape is None:
        return None
    dims = [d if isinstance(d, int) else sizes.get(str(d)) for d in value.shape]
    unknown = [i for i, d in enumerate(dims) if d is None]
    known = math.prod(d for d in dims if d is not None)
    if len(unknown) > 1 or known == 0 or size % known:
        return None
    if unknown:
        dims[unknown[0]] = size // known
    return tuple(dims) if math.prod(dims) == size else None


def _spans(bias: ir.Value, q: ir.Value, k: ir.Value) -> bool:
    """Is `bias` known to span the query and key lengths, as MultiHeadAttention requires (it
    broadcasts a bias only over the batch and the heads)?"""
    shape = bias.shape
    return (
        shape is not None and str(shape[2]) == str(q.shape[1]) and str(shape[3]) == str(k.shape[1])
    )


def _expanded(chain: NodeChain, bias: ir.Value, q: ir.Value, k: ir.Value) -> ir.Value:
    """`bias` expanded to (.., .., query length, key length)."""
    query = chain.node("Shape", [q], "query_length", start=1, end=2)
    key = chain.node("Shape", [k], "key_length", start=1, end=2)
    ones = chain.const("leading_ones", np.ones(2, np.int64))
    shape = chain.node("Concat", [ones, query, key], "bias_shape", axis=0)
    return chain.node("Expand", [bias, shape], "bias_spanning")
