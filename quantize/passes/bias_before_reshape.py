"""Move a bias Add in front of the Reshape that separates it from its MatMul.

A Keras Dense layer on a sequence exports through tf2onnx as Tensordot: Reshape to 2-D ->
MatMul -> Reshape back to 3-D -> Add(bias). With the Reshape in between, the bias cannot join
the MatMul's Gemm, and ORT adds it in float over the whole output, after an INT8 Gemm that
could have added it for free. Adding a vector along the last axis commutes with a Reshape that
keeps that axis, so the Add moves before it and `MatMulToGemmPass` fuses it.
"""

import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, read_once


class BiasBeforeReshapePass(FusionPass):
    """Rewrites MatMul -> Reshape -> Add(constant vector along the last axis) as
    MatMul -> Add -> Reshape, where the MatMul is 2-D with constant weights. The Reshape's
    output takes the Add's name."""

    def match(self, add: ir.Node) -> tuple[ir.Node, ir.Value] | None:
        """(the Reshape, the bias) for a bias Add that can move."""
        if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
            return None
        for reshaped, bias in (add.inputs, add.inputs[::-1]):
            reshape = reshaped.producer() if reshaped is not None else None
            if reshape is None or reshape.op_type != "Reshape" or not read_once(reshaped):
                continue
            if not _from_weighted_2d(reshape.inputs[0]):
                continue
            if _vector_of(bias, reshaped, reshape.inputs[0].shape[-1]):
                return reshape, bias
        return None

    def rewrite(self, graph: ir.Graph, add: ir.Node, found: tuple[ir.Node, ir.Value]) -> None:
        reshape, bias = found
        vector = add_initializer(graph, f"{bias.name}_vector", bias.const_value.numpy().reshape(-1))
        moved = ir.Node("", "Add", [reshape.inputs[0], vector], name=add.name)
        graph.insert_before(reshape, moved)
        moved.outputs[0].name = f"{add.name}:0_2d"
        moved.outputs[0].type, moved.outputs[0].shape = add.outputs[0].type, reshape.inputs[0].shape
        reshape.replace_input_with(0, moved.outputs[0])
        out, reshaped = add.outputs[0], reshape.outputs[0]
        name, out.name = out.name, None
        reshaped.name, reshaped.type, reshaped.shape = name, out.type, out.shape
        ir.convenience.replace_all_uses_with(out, reshaped, replace_graph_outputs=True)
        graph.remove(add, safe=True)


def _from_weighted_2d(value: ir.Value) -> bool:
    """Is `value` the 2-D output of a MatMul with constant weights?"""
    node = value.producer()
    return (
        node is not None
        and node.op_type == "MatMul"
        and node.domain == ""
        and node.inputs[1].const_value is not None
        and value.shape is not None
        and len(value.shape) == 2
        and isinstance(value.shape[-1], int)
    )


def _vector_of(bias: ir.Value, reshaped: ir.Value, columns: int) -> bool:
    """A constant with one value per column of the MatMul along the last axis of `reshaped`,
    which keeps those columns, and nothing the Add would broadcast `reshaped` to."""
    if bias.const_value is None or reshaped.shape is None or not len(reshaped.shape):
        return False
    shape = bias.const_value.shape
    return (
        1 <= len(shape) <= len(reshaped.shape)
        and reshaped.shape[-1] == columns
        and shape[-1] == columns
        and all(d == 1 for d in shape[:-1])
    )
