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


def uses_auto_pad(node: ir.Node) -> bool:
    return "auto_pad" in node.attributes and node.attributes["auto_pad"].value not in ("NOTSET", "")


def replace_nodes(graph: ir.Graph, old: list[ir.Node], new: ir.Node) -> None:
    """Put `new` in place of the chain `old`; it takes over the last node's output and name."""
    last = old[-1].outputs[0]
    graph.insert_after(old[-1], new)
    new.outputs[0].name, new.outputs[0].type, new.outputs[0].shape = last.name, last.type, last.shape
    last.name = None
    ir.convenience.replace_all_uses_with(last, new.outputs[0], replace_graph_outputs=True)
    graph.remove(old, safe=True)


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
