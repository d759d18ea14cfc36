"""`BiasBeforeReshapePass` (quantize/passes/bias_before_reshape.py) on the graph tf2onnx writes
for a Keras Dense layer on a sequence (Tensordot)."""

import numpy as np
import onnx_ir as ir
import pytest
from graphs import ops, run, run_pass
from onnx import TensorProto, helper, numpy_helper

from quantize import passes

RNG = np.random.default_rng(0)


def tensordot(bias: np.ndarray, out_shape: list[int]):
    """x (N, 5, 6) -> Reshape (N*5, 6) -> MatMul (6, 4) -> Reshape `out_shape` -> Add `bias`."""
    nodes = [
        helper.make_node("Reshape", ["x", "flat"], ["x2"]),
        helper.make_node("MatMul", ["x2", "w"], ["xw"], name="dense"),
        helper.make_node("Reshape", ["xw", "back"], ["xw3"]),
        helper.make_node("Add", ["xw3", "b"], ["y"], name="bias"),
    ]
    inits = [
        numpy_helper.from_array(np.array([-1, 6], np.int64), "flat"),
        numpy_helper.from_array(RNG.normal(size=(6, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(out_shape, np.int64), "back"),
        numpy_helper.from_array(bias.astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        nodes,
        "tensordot",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def cleaned(model) -> ir.Model:
    """The bias moved, then MatMul + bias into a Gemm, as `passes.cleanup` runs them."""
    return passes.MatMulToGemmPass()(run_pass(passes.BiasBeforeReshapePass(), model)).model


def test_a_dense_layers_bias_joins_its_gemm_across_the_reshape():
    original = tensordot(RNG.normal(size=(4,)), [-1, 5, 4])
    model = cleaned(original)
    assert ops(model) == ["Reshape", "Gemm", "Reshape"]
    assert model.graph.outputs[0].name == "y"
    x = RNG.normal(size=(3, 5, 6)).astype(np.float32)
    np.testing.assert_allclose(run(model, x), run(original, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("bias", "out_shape"),
    [
        (RNG.normal(size=(5, 1)), [-1, 5, 4]),  # varies along the sequence, not the columns
        (RNG.normal(size=(1, 1, 1, 4)), [-1, 5, 4]),  # adds an axis
        (RNG.normal(size=(2,)), [-1, 5, 2, 2]),  # the Reshape splits the columns
        (RNG.normal(size=(4,)), [-1, 5, 4, 1]),  # the Add broadcasts the Reshape's last axis
    ],
)
def test_a_bias_that_does_not_commute_with_the_reshape_stays_after_it(bias, out_shape):
    original = tensordot(bias, out_shape)
    model = cleaned(original)
    assert ops(model) == ["Reshape", "Gemm", "Reshape", "Add"]
    x = RNG.normal(size=(3, 5, 6)).astype(np.float32)
    np.testing.assert_allclose(run(model, x), run(original, x), rtol=1e-5, atol=1e-6)
