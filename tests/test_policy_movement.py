"""Data movement next to INT8 compute: when the policy runs it on uint8, and at which range."""

from pathlib import Path

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from calibration import CalibrationSource, collect_histograms
from quantize import MinMax, Recipe, passes
from quantize.pipeline import input_specs


def test_a_concat_before_an_fp32_conv_stays_fp32():
    """The 3D-to-2D windows of an excluded Conv: quantizing their Concat rounds its input."""
    from quantize.policy import select_nodes

    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        helper.make_node("Concat", ["c1", "c1"], ["cat"], axis=1, name="concat"),
        helper.make_node("Conv", ["cat", "w2"], ["y"], name="conv2"),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=(2, 1, 1, 1)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(size=(1, 4, 1, 1)).astype(np.float32), "w2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 4, 4])],
        inits,
    )
    model = passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )
    assert "concat" in select_nodes(model).int8
    assert select_nodes(model, exclude=("conv2",)).int8 == {"conv1"}


def test_data_movement_between_an_fp32_op_and_an_int8_conv_runs_on_uint8_at_one_range():
    """Abs -> two Slices -> Concat -> Conv: the Slices and the Concat are quantized with the
    Abs output's range, so the Conv's input is rounded once."""
    from quantize.plan import make_plan
    from quantize.policy import select_nodes

    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),
        helper.make_node("Slice", ["a", "zero", "four", "two"], ["s1"], name="slice1"),
        helper.make_node("Slice", ["a", "four", "eight", "two"], ["s2"], name="slice2"),
        helper.make_node("Concat", ["s1", "s2"], ["cat"], axis=1, name="concat"),
        helper.make_node("Conv", ["cat", "w"], ["y"], name="conv"),
    ]
    inits = [
        numpy_helper.from_array(np.array([v], np.int64), n)
        for n, v in (("zero", 0), ("four", 4), ("eight", 8), ("two", 2))
    ]
    inits.append(numpy_helper.from_array(rng.normal(size=(2, 2, 3, 3)).astype(np.float32), "w"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )
    chosen = select_nodes(model).int8
    assert chosen == {"slice1", "slice2", "concat", "conv"}
    x = np.random.default_rng(7).normal(size=(64, 1, 8, 8)).astype(np.float32)
    source = CalibrationSource(
        Path("memory"),
        input_specs(ir.serde.serialize_model(model)),
        len(x),
        lambda a, b: {"x": x[a:b]},
    )
    names = ["a", "s1", "s2", "cat", "y"]
    plan = make_plan(
        model,
        chosen,
        collect_histograms(ir.serde.serialize_model(model), names, source, len(x)),
        Recipe(ranges=MinMax(), target="vnni").resolved(),
    )
    assert plan.ranges["cat"] == plan.ranges["s1"] == plan.ranges["s2"] == plan.ranges["a"]


def test_data_movement_whose_shape_is_read_stays_fp32():
    """Abs -> Transpose -> Conv with a Shape of the Transpose: in uint8 the Transpose would
    need a DequantizeLinear of its whole output just for that Shape."""
    from quantize.policy import select_nodes

    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),
        helper.make_node("Transpose", ["a"], ["t"], perm=[0, 1, 3, 2], name="transpose"),
        helper.make_node("Shape", ["t"], ["shape"], name="shape"),
        helper.make_node("Conv", ["t", "w"], ["y"], name="conv"),
    ]
    weight = numpy_helper.from_array(
        np.random.default_rng(8).normal(size=(2, 1, 3, 3)).astype(np.float32), "w"
    )
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, "H", 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("shape", TensorProto.INT64, None),
        ],
        [weight],
    )
    model = passes.cleanup(
        ir.serde.deserialize_model(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        )
    )
    assert select_nodes(model).int8 == {"conv"}
