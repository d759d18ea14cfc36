"""`IntegerMatMulBiasPass` (quantize/passes/integer_matmul_bias.py): lowering for ONNX Runtime
gives a float-output INT8 MatMul its bias; for another runtime the bias Add stays."""

import dataclasses

import numpy as np
import onnx_ir as ir
from graphs import _init, images, plan_for, run
from onnx import TensorProto, helper

from quantize import passes
from quantize.validate import layer_sqnr


def two_dense_layers():
    """x (n, 3, 16, 16) @ W1 + b1 -> y1, read by a bias Add alone; x @ W2, also an output of the
    model, + b2 -> y2."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["p1"], name="dense1"),
        helper.make_node("Add", ["p1", "b1"], ["y1"], name="bias1"),
        helper.make_node("MatMul", ["x", "w2"], ["p2"], name="dense2"),
        helper.make_node("Add", ["b2", "p2"], ["y2"], name="bias2"),
    ]
    inits = [
        _init("w1", rng.normal(0, 0.3, (16, 8)).astype(np.float32)),
        _init("b1", rng.normal(0, 1, 8).astype(np.float32)),
        _init("w2", rng.normal(0, 0.3, (16, 8)).astype(np.float32)),
        _init("b2", rng.normal(0, 1, 8).astype(np.float32)),
    ]
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("y1", "p2", "y2")
    ]
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 16, 16])],
        outputs,
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def lowered(runtime: str) -> ir.Model:
    model = passes.cleanup(ir.serde.deserialize_model(two_dense_layers()))
    plan = plan_for(model, {"dense1", "dense2"})
    return passes.lower_to_qdq(model, dataclasses.replace(plan, runtime=runtime))


def test_for_onnx_runtime_a_biased_int8_matmul_becomes_one_kernel_that_adds_its_bias():
    q = lowered("onnxruntime")
    fused = next(n for n in q.graph if n.name == "dense1")
    assert (fused.domain, fused.op_type) == ("com.microsoft", "MatMulIntegerToFloat")
    assert fused.inputs[0].producer().op_type == "QuantizeLinear"
    assert fused.inputs[1].const_value.dtype in (ir.DataType.INT8, ir.DataType.UINT8)
    assert fused.inputs[6].name == "b1" and fused.outputs[0].name == "y1"
    assert "bias1" not in {n.name for n in q.graph}
    # the product is an output too: its Add is not the only reader, so it stays
    assert {"dense2", "bias2"} <= {n.name for n in q.graph if n.op_type in ("MatMul", "Add")}
    assert q.opset_imports["com.microsoft"] == 1


def test_the_fused_kernel_computes_what_the_qdq_matmul_and_its_bias_add_do():
    x = images(8)
    ours, qdq = run(lowered("onnxruntime"), x), run(lowered("openvino"), x)
    assert np.allclose(ours, qdq, rtol=1e-5, atol=1e-5)
    fp32 = run(two_dense_layers(), x)
    assert 10 * np.log10(np.sum(fp32**2) / np.sum((fp32 - ours) ** 2)) > 25


def test_for_another_runtime_the_model_keeps_standard_ops_only():
    q = lowered("openvino")
    assert all(n.domain in ("", "ai.onnx") for n in q.graph)
    assert {"bias1", "bias2"} <= {n.name for n in q.graph}


def test_layer_sqnr_reads_an_activation_that_only_the_fused_kernel_reads():
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["h"], name="squash"),
        helper.make_node("MatMul", ["h", "w"], ["p"], name="dense"),
        helper.make_node("Add", ["p", "b"], ["y"], name="bias"),
    ]
    rng = np.random.default_rng(5)
    inits = [
        _init("w", rng.normal(0, 0.3, (16, 8)).astype(np.float32)),
        _init("b", rng.normal(0, 1, 8).astype(np.float32)),
    ]
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    fp32 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = passes.cleanup(ir.serde.deserialize_model(fp32))
    q = ir.serde.serialize_model(passes.lower_to_qdq(model, plan_for(model, {"dense"})))
    assert not any(
        n.op_type == "DequantizeLinear" and n.input[0] == "h_quantized" for n in q.graph.node
    )
    sqnr = layer_sqnr(fp32, q, {}, {"x": images(4)})
    assert sqnr.keys() == {"h"} and 30 < sqnr["h"] < 70
