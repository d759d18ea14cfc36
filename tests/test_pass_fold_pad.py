"""`FoldPadIntoConvPass` (quantize/passes/fold_pad.py) on small hand-built graphs."""

import numpy as np
from graphs import ops, run, run_pass
from onnx import TensorProto, helper, numpy_helper

from quantize import passes


def test_zero_pad_through_a_layout_transpose_folds_into_the_conv():
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"]),
        helper.make_node("Transpose", ["p"], ["t"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["t", "w"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([0, 1, 2, 0, 0, 1, 2, 0], np.int64), "pads"),
        numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5, 6, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 5, 8])],
        inits,
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    model = run_pass(passes.FoldPadIntoConvPass(), original)
    assert ops(model) == ["Transpose", "Conv"]
    x = rng.normal(size=(2, 5, 6, 3)).astype(np.float32)
    np.testing.assert_allclose(run(model, x), run(original, x), rtol=1e-5, atol=1e-5)
