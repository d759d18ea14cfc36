"""ONNX Runtime's MultiHeadAttention, as FuseAttentionPass writes it, -> the ONNX Attention op of
opset 23, the model raised to that opset by ONNX's version converter.

The two compute the same attention (to the bit on ORT's CPU), but with an attention bias, the
padding mask every BERT export carries, ORT's kernel for ONNX Attention is the faster
(`python -m benchmarks.ort_fusions`); on an AMX CPU the fused MultiHeadAttention was the largest
kernel of MiniLM's INT8 model. A model the converter cannot raise keeps MultiHeadAttention.
"""

import onnx_ir as ir
from onnx import version_converter

from quantize.passes.rewrite import replace_nodes

ATTENTION_OPSET = 23
ATTENTION_IR_VERSION = 11  # the IR version of opset 23


class OnnxAttentionPass(ir.passes.FunctionalPass):
    """Replaces each com.microsoft MultiHeadAttention that reads only Q, K, V and an attention
    bias by ONNX Attention, raising the model to ATTENTION_OPSET where it is below."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        # a new model either way, as a functional pass returns; a clone shares the tensors
        if not any(_replaceable(node) for node in model.graph):
            return ir.passes.PassResult(model.clone(), modified=False)
        if model.opset_imports.get("", 0) < ATTENTION_OPSET:
            try:
                raised = version_converter.convert_version(
                    ir.serde.serialize_model(model), ATTENTION_OPSET
                )
            except Exception:  # the converter raises bare RuntimeError/ValidationError by adapter
                return ir.passes.PassResult(model.clone(), modified=False)
            model = ir.serde.deserialize_model(raised)
            model.ir_version = max(model.ir_version, ATTENTION_IR_VERSION)
        else:
            model = model.clone()
        for node in [node for node in model.graph if _replaceable(node)]:
            _replace(model.graph, node)
        return ir.passes.PassResult(model, modified=True)


def _replaceable(node: ir.Node) -> bool:
    """A MultiHeadAttention of Q, K, V (3D) and at most an attention bias: no key padding mask,
    no packed or cached keys and values, so ONNX Attention computes the same."""
    if (node.domain, node.op_type) != ("com.microsoft", "MultiHeadAttention"):
        return False
    inputs = list(node.inputs)
    if len(inputs) not in (3, 6) or any(value is None for value in inputs[:3]):
        return False
    return len(inputs) == 3 or (inputs[3] is None and inputs[4] is None and inputs[5] is not None)


def _replace(graph: ir.Graph, node: ir.Node) -> None:
    heads = node.attributes["num_heads"].as_int()
    attention = ir.Node(
        "",
        "Attention",
        [*node.inputs[:3], *node.inputs[5:]],
        attributes=[
            ir.AttrInt64("q_num_heads", heads),
            ir.AttrInt64("kv_num_heads", heads),
            *(
                [ir.AttrFloat32("scale", node.attributes["scale"].as_float())]
                if "scale" in node.attributes
                else []
            ),
        ],
        name=node.name,
    )
    replace_nodes(graph, [node], attention)
