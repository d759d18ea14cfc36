"""`MatMulToGemmPass` (quantize/passes/matmul_to_gemm.py) on small hand-built graphs."""

import numpy as np
from graphs import ops, run, run_pass
from onnx import TensorProto, helper, numpy_helper

from quantize import passes


def test_matmul_plus_bias_becomes_one_gemm():
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["b", "xw"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=(6, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=(1, 3)).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        inits,
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    model = run_pass(passes.MatMulToGemmPass(), original)
    assert ops(model) == ["Gemm"] and model.graph.outputs[0].name == "y"
    x = rng.normal(size=(5, 6)).astype(np.float32)
    np.testing.assert_allclose(run(model, x), run(original, x), rtol=1e-5, atol=1e-6)


def test_a_lone_weight_matmul_becomes_a_gemm_so_ort_cannot_fold_it_into_a_float_residual_gemm():
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
        helper.make_node("Add", ["p", "x"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(
        nodes,
        "lone",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(rng.normal(0, 1, (8, 8)).astype(np.float32), "w")],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    cleaned = run_pass(passes.MatMulToGemmPass(), original)
    assert ops(cleaned) == ["Gemm", "Add"]
    x = rng.normal(0, 1, (4, 8)).astype(np.float32)
    np.testing.assert_allclose(run(cleaned, x), run(original, x), rtol=1e-5, atol=1e-5)
