"""Identities of the main graph go, and an If whose branches each return one outer value through
an Identity (the Silero VAD's, where onnx-ir's IdentityEliminationPass fails) is cleaned up and
computes what it did."""

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from onnxio import cpu_session
from quantize.passes import cleanup


def _branch(name: str, source: str) -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("Identity", [source], [f"{name}_out"])],
        name,
        [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 3])],
    )


def _if_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["relu"]),
        helper.make_node("Identity", ["relu"], ["relu_copy"]),
        helper.make_node(
            "If",
            ["flag"],
            ["chosen"],
            then_branch=_branch("then", "relu_copy"),
            else_branch=_branch("else", "relu_copy"),
        ),
        helper.make_node("Identity", ["chosen"], ["y"]),
        helper.make_node("Identity", ["x"], ["x_again"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("x_again", TensorProto.FLOAT, [2, 3]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_main_graph_identities_go_and_if_branches_keep_theirs():
    model = _if_model()
    cleaned = cleanup(ir.serde.deserialize_model(model))
    main = [n.op_type for n in cleaned.graph]
    assert main.count("Identity") == 1  # x -> x_again: an input passed to an output keeps it
    (branch_if,) = [n for n in cleaned.graph if n.op_type == "If"]
    branches = branch_if.attributes["then_branch"].value, branch_if.attributes["else_branch"].value
    assert all([n.op_type for n in b] == ["Identity"] for b in branches)
    assert [o.name for o in cleaned.graph.outputs] == ["y", "x_again"]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    out = ir.serde.serialize_model(cleaned)
    for flag in (True, False):
        feed = {"x": x, "flag": np.array(flag)}
        expected = cpu_session(model).run(None, feed)
        for got, want in zip(cpu_session(out).run(None, feed), expected):
            np.testing.assert_array_equal(got, want)
