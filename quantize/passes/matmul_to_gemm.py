"""Turn weight MatMuls into Gemms: MatMul(A, W) + bias fused, and a lone MatMul(A, W) alone.

A MatMul followed by an Add of a constant vector (how Dense layers export) cannot run as one
integer kernel: ORT fuses Gemm with its bias (QGemm), not a separate Add. A 2-D MatMul with
constant weights and no bias (an exporter drops a zero bias) becomes a Gemm too: left a
MatMul, ORT's float MatMulAddFusion would merge it with a following residual Add before its
Q/DQ fusions run, and the weights would be dequantized at every run.
"""

import onnx_ir as ir

from quantize.passes.rewrite import FusionPass, add_initializer, read_once, replace_nodes


class MatMulToGemmPass(FusionPass):
    """Rewrites MatMul + constant-bias Add as one Gemm, and a lone 2-D MatMul with constant
    weights as a Gemm without bias: ORT's INT8 QGemm then owns weights and bias.

    Only 2-D MatMuls with a 2-D constant weight; the Add's bias must have one value per column."""

    def match(self, add: ir.Node) -> tuple[ir.Node, ir.Value] | None:
        """The 2-D MatMul with constant weights feeding `add`, and the constant bias."""
        if add.op_type != "Add" or len(add.inputs) != 2:
            return None
        for product, bias in (add.inputs, add.inputs[::-1]):
            matmul = product.producer() if product is not None else None
            if matmul is None or matmul.op_type != "MatMul" or not read_once(product):
                continue
            if not _is_weight_matmul_2d(matmul):
                continue
            w = matmul.inputs[1]
            if (
                bias.const_value is not None
                and bias.const_value.size == w.const_value.shape[1]
                and len(bias.const_value.shape) <= 2
            ):
                return matmul, bias
        return None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        fused = super().call(model).modified
        lone = [n for n in model.graph if n.op_type == "MatMul" and _is_weight_matmul_2d(n)]
        for matmul in lone:
            replace_nodes(
                model.graph, [matmul], ir.Node("", "Gemm", list(matmul.inputs), name=matmul.name)
            )
        return ir.passes.PassResult(model, modified=fused or bool(lone))

    def rewrite(self, graph: ir.Graph, add: ir.Node, found: tuple[ir.Node, ir.Value]) -> None:
        matmul, bias = found
        if len(bias.const_value.shape) != 1:
            bias = add_initializer(
                graph, f"{bias.name}_vector", bias.const_value.numpy().reshape(-1)
            )
        replace_nodes(
            graph,
            [matmul, add],
            ir.Node("", "Gemm", [matmul.inputs[0], matmul.inputs[1], bias], name=matmul.name),
        )


def _is_weight_matmul_2d(matmul: ir.Node) -> bool:
    a, w = matmul.inputs
    return (
        w.const_value is not None
        and len(w.const_value.shape) == 2
        and a.shape is not None
        and len(a.shape) == 2
    )
