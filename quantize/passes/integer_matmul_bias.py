"""An INT8 MatMul with a float output and a bias, written as the ONNX Runtime kernel that owns
the bias. ORT turns `DequantizeLinear -> MatMul` into its MatMulIntegerToFloat, whose output
stage can add a bias, but it fuses a following bias Add only when the activation scale is
computed at run time (dynamic quantization). With a static scale the Add stays a pass of its
own over the output, and a bias Add before an Erf GELU makes ORT run BiasGelu instead of its
faster Gelu (benchmarks/ort_fusions.py)."""

import onnx_ir as ir

from quantize.passes.rewrite import replace_nodes

MS_DOMAIN = "com.microsoft"


class IntegerMatMulBiasPass(ir.passes.InPlacePass):
    """Replaces each `DequantizeLinear(x) @ DequantizeLinear(W) + b`, where the product is read
    by that Add alone and `b` is a constant vector over the output columns, by one
    com.microsoft MatMulIntegerToFloat(x_q, W_q, scales, zero points, b). The same arithmetic:
    the integer product, scaled, plus the bias, in float. Only where the activation has one
    scale and the weight one per column or one in all, as MatMulIntegerToFloat takes them."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        fused = 0
        for matmul in [node for node in model.graph if node.op_type == "MatMul"]:
            match = _biased_integer_matmul(matmul)
            if match is None:
                continue
            activation, weight, add, bias = match
            integer = ir.Node(
                MS_DOMAIN,
                "MatMulIntegerToFloat",
                [
                    activation.inputs[0],
                    weight.inputs[0],
                    activation.inputs[1],
                    weight.inputs[1],
                    activation.inputs[2],
                    weight.inputs[2],
                    bias,
                ],
                name=matmul.name,
            )
            replace_nodes(model.graph, [matmul, add], integer)
            fused += 1
        if fused:
            model.opset_imports[MS_DOMAIN] = 1
        return ir.passes.PassResult(model, modified=bool(fused))


def _biased_integer_matmul(matmul: ir.Node):
    """(activation DequantizeLinear, weight DequantizeLinear, Add, bias) if `matmul` multiplies
    a dequantized activation by a dequantized constant weight and only a bias Add reads it."""
    activation, weight = (value.producer() for value in matmul.inputs)
    if not all(p is not None and p.op_type == "DequantizeLinear" for p in (activation, weight)):
        return None
    if not _scales_fit(activation, weight):
        return None
    product = matmul.outputs[0]
    uses = product.uses()
    if len(uses) != 1 or product.is_graph_output() or uses[0][0].op_type != "Add":
        return None
    add = uses[0][0]
    bias = add.inputs[1 - uses[0][1]]
    columns = weight.inputs[0].shape[1]
    if bias.const_value is None or bias.dtype != ir.DataType.FLOAT or bias.shape.dims != (columns,):
        return None
    return activation, weight, add, bias


def _scales_fit(activation: ir.Node, weight: ir.Node) -> bool:
    """One activation scale; a constant 2-D weight with one scale, or one per output column."""
    if len(activation.inputs) < 3 or len(weight.inputs) < 3:
        return False  # no zero point given: not how InsertQDQPass writes them
    matrix, scale = weight.inputs[0], weight.inputs[1]
    if matrix.const_value is None or matrix.shape.rank() != 2:
        return False
    axis = weight.attributes["axis"].value if "axis" in weight.attributes else 1
    per_column = scale.shape.rank() == 1 and axis in (1, -1)
    return activation.inputs[1].shape.rank() == 0 and (scale.shape.rank() == 0 or per_column)
