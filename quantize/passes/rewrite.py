"""Building blocks of graph rewrites: constants, node replacement, and a match-rewrite pass."""

import numpy as np
import onnx_ir as ir


def add_initializer(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    value = ir.Value(name=name, const_value=ir.tensor(np.asarray(array), name=name))
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


class NodeChain:
    """New nodes and constants, named after the node they stand for, collected in order."""

    def __init__(self, graph: ir.Graph, name: str):
        self.graph, self.name, self.nodes = graph, name, []

    def const(self, suffix: str, array) -> ir.Value:
        return add_initializer(self.graph, f"{self.name}_{suffix}", np.asarray(array))

    def node(self, op: str, inputs: list, suffix: str, **attributes) -> ir.Value:
        attrs = [
            ir.AttrInt64s(key, v) if isinstance(v, list) else ir.AttrInt64(key, v)
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
