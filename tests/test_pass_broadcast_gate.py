"""`BroadcastGatePass`: a quantized Mul of a feature map by its squeeze-and-excitation gate
reads the gate copied to the map's shape, on NHWC data in ONNX Runtime with no Transpose of its
own, and the model computes the same bits."""

import numpy as np
import onnx_ir as ir
from graphs import image_model, images, plan_for, run
from onnx import helper, numpy_helper
from onnx_ir.passes import common

from quantize import passes
from quantize.coverage import optimized_graph


def _se_block() -> ir.Model:
    """x -> Conv -> c; c * Sigmoid(Conv(GlobalAveragePool(c))) -> Conv -> y."""
    rng = np.random.default_rng(0)

    def weight(name, shape):
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w_in"], ["c"], pads=[1, 1, 1, 1], name="conv_in"),
        helper.make_node("GlobalAveragePool", ["c"], ["pooled"], name="squeeze"),
        helper.make_node("Conv", ["pooled", "w_gate"], ["logits"], name="excite"),
        helper.make_node("Sigmoid", ["logits"], ["gate"], name="sigmoid"),
        helper.make_node("Mul", ["c", "gate"], ["gated"], name="gated"),
        helper.make_node("Conv", ["gated", "w_out"], ["y"], name="conv_out"),
    ]
    inits = [
        weight("w_in", (8, 3, 3, 3)),
        weight("w_gate", (8, 8, 1, 1)),
        weight("w_out", (4, 8, 1, 1)),
    ]
    return passes.cleanup(ir.serde.deserialize_model(image_model(nodes, inits, "se", 4)))


def _lowered(model: ir.Model, broadcast_gate: bool) -> ir.Model:
    plan = plan_for(model, {n.name for n in model.graph})
    chain = [passes.InsertQDQPass(plan)]
    if broadcast_gate:
        chain.append(passes.BroadcastGatePass(plan))
    chain += [common.RemoveUnusedNodesPass(), common.CheckerPass()]
    return ir.passes.PassManager(chain)(model.clone()).model


def test_the_gate_is_copied_to_the_maps_shape_with_no_transpose_of_its_own_to_the_same_bits():
    model = _se_block()
    x = images(4)
    before, after = _lowered(model, False), _lowered(model, True)
    graph_before = optimized_graph(ir.serde.serialize_model(before))
    graph = optimized_graph(ir.serde.serialize_model(after))
    producers = {out: n.op_type for n in graph.node for out in n.output}
    (mul,) = [n for n in graph.node if n.op_type == "QLinearMul"]
    assert producers[mul.input[3]] == "Expand"  # its second operand, the gate, at full size
    ran, ran_before = [n.op_type for n in graph.node], [n.op_type for n in graph_before.node]
    for op in ("Transpose", "QuantizeLinear", "DequantizeLinear"):
        assert ran.count(op) == ran_before.count(op), op
    assert np.array_equal(run(after, x), run(before, x))
    assert np.abs(run(after, x) - run(model, x)).max() < 0.1 * np.abs(run(model, x)).max()


def test_a_mul_of_two_maps_of_one_shape_is_left_alone():
    model = _se_block()
    mul = next(n for n in model.graph if n.op_type == "Mul")
    mul.replace_input_with(1, mul.inputs[0])  # c * c
    after = _lowered(model, True)
    assert "Expand" not in [n.op_type for n in after.graph]
