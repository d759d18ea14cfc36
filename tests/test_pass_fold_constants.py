"""`FoldConstantsPass` (quantize/passes/fold_constants.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import ops, run
from onnx import TensorProto, helper, numpy_helper

from quantize import passes


def test_constant_subgraphs_are_folded_and_the_function_kept():
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Transpose", ["ab"], ["abt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "abt"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "a"),
        numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "b"),
    ]
    original = helper.make_model(
        helper.make_graph(nodes, "g", [x_info], [y_info], inits),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    original.ir_version = 8
    result = passes.FoldConstantsPass()(ir.serde.deserialize_model(original))
    assert result.modified and ops(result.model) == ["MatMul"]
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_allclose(run(result.model, x), run(original, x), rtol=1e-6)
