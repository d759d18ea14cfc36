"""Fuse MatMul(A, W) + bias into Gemm, so the bias is quantized to int32 with the weights.

A MatMul followed by an Add of a constant vector (how Dense layers export) cannot run as one
integer kernel: ORT fuses Gemm with its bias (QGemm), not a separate Add.
"""

import onnx_ir as ir

from quantize.passes.initializers import add_initializer


class FuseMatMulAddPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        fused = 0
        for add in list(model.graph):
            matmul = _fusable_matmul(add)
            if matmul is not None:
                _fuse(model.graph, matmul, add)
                fused += 1
        return ir.passes.PassResult(model, modified=fused > 0)


def _fusable_matmul(add: ir.Node) -> ir.Node | None:
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
            return matmul
    return None


def _fuse(graph: ir.Graph, matmul: ir.Node, add: ir.Node) -> None:
    bias = add.inputs[1] if add.inputs[0] is matmul.outputs[0] else add.inputs[0]
    if len(bias.const_value.shape) != 1:
        bias = add_initializer(graph, f"{bias.name}_vector", bias.const_value.numpy().reshape(-1))
    gemm = ir.Node("", "Gemm", [matmul.inputs[0], matmul.inputs[1], bias], name=matmul.name)
    graph.insert_after(add, gemm)
    gemm.outputs[0].name = add.outputs[0].name
    gemm.outputs[0].type, gemm.outputs[0].shape = add.outputs[0].type, add.outputs[0].shape
    ir.convenience.replace_all_uses_with(add.outputs[0], gemm.outputs[0], replace_graph_outputs=True)
    add.outputs[0].name = None
    graph.remove([add, matmul], safe=True)
