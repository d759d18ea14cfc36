"""`SplitBeforeTransposePass` (quantize/passes/split_before_transpose.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import ops, run
from onnx import TensorProto, helper, numpy_helper

from quantize import passes


def test_a_reshape_that_splits_axes_moves_before_a_transpose_which_merges_with_the_next():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "split"], ["s"]),
        helper.make_node("Transpose", ["s"], ["y"], perm=[0, 3, 1, 4, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([-1, 6, 3, 2, 2], np.int64), "split")],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cleaned = passes.cleanup(ir.serde.deserialize_model(original))
    assert ops(cleaned) == ["Reshape", "Transpose"]
    x = np.random.default_rng(4).normal(size=(2, 4, 6, 3)).astype(np.float32)
    np.testing.assert_array_equal(run(cleaned, x), run(original, x))


def test_a_reshape_that_merges_axes_stays_after_the_transpose():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "merge"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([-1, 18, 4], np.int64), "merge")],
    )
    cleaned = passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )
    assert ops(cleaned) == ["Transpose", "Reshape"]
