"""`InsertQDQPass` (quantize/passes/insert_qdq.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import conv_net, images, plan_for, run

from quantize import passes
from quantize.passes import insert_qdq


def test_qdq_insertion_gives_per_channel_int8_weights_and_int32_bias():
    model = passes.cleanup(ir.serde.deserialize_model(conv_net(batchnorm=False)))
    plan = plan_for(model, {"conv1", "fc"})
    q = passes.lower_to_qdq(model, plan)
    dequantize = {n.outputs[0].name: n for n in q.graph if n.op_type == "DequantizeLinear"}
    conv = next(n for n in q.graph if n.name == "conv1")
    w_dq, b_dq = dequantize[conv.inputs[1].name], dequantize[conv.inputs[2].name]
    assert (
        w_dq.inputs[0].const_value.dtype == ir.DataType.INT8 and w_dq.attributes["axis"].value == 0
    )
    assert w_dq.inputs[1].const_value.shape.numpy() == (8,)
    assert b_dq.inputs[0].const_value.dtype == ir.DataType.INT32
    fc = next(n for n in q.graph if n.name == "fc")
    assert (
        dequantize[fc.inputs[1].name].attributes["axis"].value == 0
    )  # transB=1: rows are output channels
    assert dequantize[conv.inputs[0].name].inputs[0].producer().op_type == "QuantizeLinear"
    assert not any(
        v.dtype == ir.DataType.FLOAT and v.name in ("w1", "wf")
        for v in q.graph.initializers.values()
    )


def test_qdq_model_stays_close_to_fp32():
    original = conv_net(batchnorm=False)
    model = passes.cleanup(ir.serde.deserialize_model(original))
    x = images(8)
    plan = plan_for(model, {n.name for n in model.graph if n.op_type in ("Conv", "Gemm", "Add")})
    q = passes.lower_to_qdq(model, plan)
    ref, got = run(original, x), run(q, x)
    assert 10 * np.log10(np.sum(ref**2) / np.sum((ref - got) ** 2)) > 25


def test_reduction_rows_lay_a_weight_out_as_mlas_reduces_it():
    """A row per output channel, the reduction in MLAS's order: a Conv's kernel positions
    outermost and input channels innermost; a Gemm's or MatMul's K in order, whichever way B
    is stored."""
    weight = np.arange(4 * 3 * 2 * 2).reshape(4, 3, 2, 2)  # (out, in, kh, kw)
    conv = ir.node("Conv", [])
    rows = insert_qdq.reduction_rows(conv, weight)
    assert rows.shape == (4, 12) and list(rows[1, :4]) == [
        weight[1, 0, 0, 0],
        weight[1, 1, 0, 0],
        weight[1, 2, 0, 0],
        weight[1, 0, 0, 1],
    ]
    b = np.arange(6 * 5).reshape(6, 5)  # K = 6, N = 5
    for node, stored in (
        (ir.node("MatMul", []), b),
        (ir.node("Gemm", [], attributes={"transB": 0}), b),
        (ir.node("Gemm", [], attributes={"transB": 1}), b.T),
    ):
        assert np.array_equal(insert_qdq.reduction_rows(node, stored), b.T)
