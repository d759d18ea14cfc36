"""`MergeTransposesPass` (quantize/passes/merge_transposes.py) on small hand-built graphs."""

import numpy as np
from graphs import ops, run, run_pass
from onnx import TensorProto, helper

from quantize import passes


def test_transpose_pairs_that_undo_each_other_are_removed():
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4, 5])],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    model = run_pass(passes.MergeTransposesPass(), original)
    assert ops(model) == ["Relu"]
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(run(model, x), run(original, x))
