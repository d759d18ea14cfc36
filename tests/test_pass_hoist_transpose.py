"""`HoistTransposePass` (quantize/passes/hoist_transpose.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import ops, run, run_pass
from onnx import TensorProto, helper, numpy_helper

from quantize import passes
from quantize.passes import HoistTransposePass

X_SHAPE = (2, 3, 4, 2, 5)  # (N, A, B, 2, C)


def _model(nodes, initializers):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *X_SHAPE[1:]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), name) for name, v in initializers.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x():
    return np.random.default_rng(3).normal(size=X_SHAPE).astype(np.float32)


def test_a_transpose_moves_up_through_merge_crop_activation_and_scale_into_the_one_before():
    """Channels-first after a pixel shuffle, channels-last before the next Conv: one movement."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 4, 2, 1, 3]),  # (N, C, B, A, 2)
        helper.make_node("Reshape", ["t", "merge"], ["m"]),  # (N, C, B, 2A)
        helper.make_node("Slice", ["m", "start", "end", "axes"], ["s"]),  # crop 2A to 5
        helper.make_node("LeakyRelu", ["s"], ["a"], alpha=0.3),
        helper.make_node("Mul", ["a", "scale"], ["b"]),  # per channel, (C, 1, 1)
        helper.make_node("Transpose", ["b"], ["y"], perm=[0, 2, 3, 1]),  # (N, B, 5, C)
    ]
    original = _model(
        nodes,
        {
            "merge": np.array([-1, 5, 4, 6], np.int64),
            "start": np.array([0], np.int64),
            "end": np.array([5], np.int64),
            "axes": np.array([-1], np.int64),
            "scale": np.arange(1, 6, dtype=np.float32).reshape(5, 1, 1),
        },
    )
    hoisted = run_pass(HoistTransposePass(), original)
    assert ops(hoisted) == ["Transpose", "Reshape", "Slice", "LeakyRelu", "Mul"]
    assert list(hoisted.graph.node(0).attributes["perm"].value) == [0, 2, 1, 3, 4]  # C stays last
    np.testing.assert_array_equal(run(hoisted, _x()), run(original, _x()))


def test_transposes_that_cancel_around_elementwise_ops_both_go():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 4, 1, 2, 3]),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("Add", ["r", "shift"], ["b"]),
        helper.make_node("Transpose", ["b"], ["y"], perm=[0, 2, 3, 4, 1]),
    ]
    original = _model(nodes, {"shift": np.arange(5, dtype=np.float32).reshape(5, 1, 1, 1)})
    cleaned = passes.cleanup(ir.serde.deserialize_model(original))
    assert ops(cleaned) == ["Relu", "Add"]
    np.testing.assert_array_equal(run(cleaned, _x()), run(original, _x()))


def test_a_value_between_that_another_op_reads_keeps_both_transposes():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 4, 1, 2, 3]),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("Transpose", ["r"], ["back"], perm=[0, 2, 3, 4, 1]),
        helper.make_node("Sigmoid", ["r"], ["g"]),
        helper.make_node("ReduceSum", ["g"], ["total"], keepdims=0),
        helper.make_node("Add", ["back", "total"], ["y"]),
    ]
    hoisted = run_pass(HoistTransposePass(), _model(nodes, {}))
    assert ops(hoisted).count("Transpose") == 2
