"""Fuse MatMul(A, W) + bias into Gemm, so the bias is quantized to int32 with the weights.

A MatMul followed by an Add of a constant vector (how Dense layers export) cannot run as one
integer kernel: ORT fuses Gemm with its bias (QGemm), not a separate Add.
"""

import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, replace_nodes


class FuseMatMulAddPass(FusionPass):
    def match(self, add: ir.Node) -> tuple[ir.Node, ir.Value] | None:
        """The 2-D MatMul with constant weights feeding `add`, and the constant bias."""
        if add.op_type != "Add" or len(add.inputs) != 2:
            return None
        for product, bias in (add.inputs, add.inputs[::-1]):
            matmul = product.producer() if product is not None else None
            if matmul is None or matmul.op_type != "MatMul" or len(product.uses()) != 1 or product.is_graph_output():
                continue
            a, w = matmul.inputs
            if w.const_value is None or len(w.const_value.shape) != 2 or a.shape is None or len(a.shape) != 2:
                continue
            if bias.const_value is not None and bias.const_value.size == w.const_value.shape[1] and len(bias.const_value.shape) <= 2:
                return matmul, bias
        return None

    def rewrite(self, graph: ir.Graph, add: ir.Node, found: tuple[ir.Node, ir.Value]) -> None:
        matmul, bias = found
        if len(bias.const_value.shape) != 1:
            bias = add_initializer(graph, f"{bias.name}_vector", bias.const_value.numpy().reshape(-1))
        replace_nodes(graph, [matmul, add], ir.Node("", "Gemm", [matmul.inputs[0], matmul.inputs[1], bias], name=matmul.name))
