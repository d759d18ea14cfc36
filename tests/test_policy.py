"""The policy on hand-built graphs, without ONNX Runtime: which nodes go to INT8 and why the
others stay FP32."""

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from quantize.policy import (
    NOT_BETWEEN_INT8,
    TRANSFORMER_FP32_OPS,
    decisions,
    outside_convs,
    select_nodes,
    sent_back,
)


def attention_block() -> ir.Model:
    """x -> Conv -> Relu -> Reshape -> MatMul(., its own transpose) -> Softmax -> Add(bias) -> Tanh."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["q"], name="reshape"),
        helper.make_node("Transpose", ["q"], ["k"], perm=[0, 2, 1], name="transpose"),
        helper.make_node("MatMul", ["q", "k"], ["scores"], name="scores"),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1, name="softmax"),
        helper.make_node("Add", ["p", "bias"], ["a"], name="add"),
        helper.make_node("Tanh", ["a"], ["y"], name="tanh"),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=(4, 1, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([0, 4, 36], np.int64), "shape"),
        numpy_helper.from_array(rng.normal(size=(4,)).astype(np.float32), "bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    for name in ("c", "r", "q", "k", "scores", "p", "a"):
        graph.value_info.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return ir.serde.deserialize_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    )


def test_every_float_node_the_policy_leaves_out_has_its_reason():
    selection = select_nodes(attention_block())
    assert selection.int8 == {"conv", "reshape", "transpose", "scores", "softmax", "add"}
    assert selection.fp32 == {"tanh": "no INT8 kernel in ONNX Runtime"}


def test_a_softmax_goes_to_int8_only_between_int8_ops():
    after_fp32 = select_nodes(attention_block(), exclude=("scores",))
    assert "softmax" not in after_fp32.int8
    assert after_fp32.fp32["softmax"] == NOT_BETWEEN_INT8
    before_fp32 = select_nodes(attention_block(), exclude=("add",))
    assert "softmax" not in before_fp32.int8 and "scores" in before_fp32.int8
    assert before_fp32.fp32["softmax"] == NOT_BETWEEN_INT8


def test_a_recipe_without_activation_matmuls_says_so_and_drops_the_movement_around_them():
    selection = select_nodes(attention_block(), exclude=("Add",), activation_matmuls=False)
    assert selection.int8 == {"conv"}
    assert (
        selection.fp32["scores"] == "a MatMul of two activations (attention), FP32 in this recipe"
    )
    assert selection.fp32["add"] == "excluded by the user"
    assert (
        selection.fp32["reshape"]
        == selection.fp32["transpose"]
        == "data movement outside an INT8 region"
    )


def test_measured_reasons_win_over_the_policy_and_are_kept_through_reselection():
    selection = select_nodes(attention_block(), kept_fp32={"scores": "INT8 slower than FP32"})
    assert "scores" not in selection.int8 and selection.fp32["scores"] == "INT8 slower than FP32"


def test_sent_back_moves_only_int8_nodes_and_keeps_earlier_reasons():
    model = attention_block()
    selection = select_nodes(model, exclude=("tanh",))
    moved = sent_back(model, selection, {"add": "island", "tanh": "island"})
    assert moved.int8 == selection.int8 - {"add"}  # the Softmax before it stays: fed by INT8
    assert moved.fp32["add"] == "island" and moved.fp32["tanh"] == "excluded by the user"


def test_an_op_int8_only_between_int8_ops_follows_its_input_back_to_fp32():
    model = attention_block()
    moved = sent_back(model, select_nodes(model), {"scores": "island"})
    assert moved.int8 == {"conv", "reshape", "transpose", "add"}
    assert moved.fp32 == {
        "scores": "island",
        "softmax": NOT_BETWEEN_INT8,
        "tanh": "no INT8 kernel in ONNX Runtime",
    }


def test_decisions_list_every_float_node_once_with_a_folded_relu_as_int8():
    model = attention_block()
    selection = select_nodes(model)
    folded = {d.name: (d.precision, d.reason) for d in decisions(model, selection, {"relu": "c"})}
    assert list(folded) == [
        "conv",
        "relu",
        "reshape",
        "transpose",
        "scores",
        "softmax",
        "add",
        "tanh",
    ]
    assert folded["relu"] == ("int8", "folded into the uint8 clamp")
    kept = {
        d.name: d.reason
        for d in decisions(model, sent_back(model, selection, {"conv": "island"}), {})
    }
    assert kept["relu"].startswith("the op before it is FP32")


def backbone_then_attention() -> ir.Model:
    """x -> Conv -> + b (shift) -> Conv -> * g (gate) -> [GlobalAveragePool -> Conv -> y1,
    Concat(gated, d) -> Conv -> y2]; the second Conv also -> + itself (residual) -> Tanh -> y3,
    and -> * 2 -> y4 (a graph output)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1"),
        helper.make_node("Add", ["c", "b"], ["s"], name="shift"),
        helper.make_node("Conv", ["s", "w2"], ["d"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Mul", ["d", "g"], ["m"], name="gate"),
        helper.make_node("GlobalAveragePool", ["m"], ["p"], name="pool"),
        helper.make_node("Conv", ["p", "w3"], ["y1"], name="squeeze"),
        helper.make_node("Concat", ["m", "d"], ["cat"], axis=1, name="concat"),
        helper.make_node("Conv", ["cat", "w4"], ["y2"], name="merge"),
        helper.make_node("Add", ["d", "d"], ["r"], name="residual"),
        helper.make_node("Tanh", ["r"], ["y3"], name="tanh"),
        helper.make_node("Mul", ["d", "two"], ["y4"], name="double"),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name)
        for name, shape in [
            ("w1", (4, 1, 1, 1)),
            ("w2", (4, 4, 3, 3)),
            ("w3", (2, 4, 1, 1)),
            ("w4", (2, 8, 1, 1)),
            ("b", (1, 4, 1, 1)),
            ("g", (1, 4, 1, 1)),
            ("two", ()),
        ]
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [
            helper.make_tensor_value_info(y, TensorProto.FLOAT, None)
            for y in ("y1", "y2", "y3", "y4")
        ],
        inits,
    )
    return ir.serde.deserialize_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    )


def test_the_transformer_ops_stay_fp32_only_outside_the_convolutions():
    """The shift, the gate (read by a pool and a concat) and the concat lead only into Convs; the
    residual Add leads into a Tanh and the doubling is a graph output."""
    assert outside_convs(backbone_then_attention(), TRANSFORMER_FP32_OPS) == {
        "residual": "Add outside the convolutions: FP32 in this recipe",
        "double": "Mul outside the convolutions: FP32 in this recipe",
    }
