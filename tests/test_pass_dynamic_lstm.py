"""`DynamicLstmPass` and the LSTM's policy: a planned LSTM runs as ONNX Runtime's
DynamicQuantizeLSTM, its weights int8 per gate channel, its input and output float."""

from dataclasses import replace

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from graphs import crnn_net, images, ops, plan_for, run
from onnx import TensorProto, helper

from quantize import Recipe, passes, quantize
from quantize.coverage import kernel_counts, optimized_graph
from quantize.kernel_timing import Boundaries, _one_node_model
from quantize.passes.dynamic_lstm import lstm_weights
from quantize.plan import QuantPlan
from quantize.policy import DYNAMIC, OUTSIDE_INT8, ort_only, select_nodes
from quantize.target import WEIGHT_FORMATS
from quantize.validate import sqnr_db


def _cleaned(model: onnx.ModelProto) -> ir.Model:
    return passes.cleanup(ir.serde.deserialize_model(model))


def test_a_planned_lstm_runs_in_the_integer_kernel_with_float_neighbours():
    cleaned = _cleaned(crnn_net())
    x = images(8)
    reference = run(cleaned, x)
    lowered = passes.lower_to_qdq(cleaned, plan_for(cleaned, {"lstm"}))
    assert "LSTM" not in ops(lowered)
    assert not {"QuantizeLinear", "DequantizeLinear"} & set(ops(lowered))  # float in and out
    kernel = next(n for n in lowered.graph if n.name == "lstm")
    assert (kernel.domain, kernel.op_type) == ("com.microsoft", "DynamicQuantizeLSTM")
    executed = kernel_counts(optimized_graph(ir.serde.serialize_model(lowered)))
    assert executed["int8"] == {"DynamicQuantizeLSTM": 1}
    result = run(lowered, x)
    assert 30 < sqnr_db(reference, result) < np.inf  # close, and really quantized


@pytest.mark.parametrize("fmt", ["int8", "int7", "paired", "uint8"])
def test_the_weights_are_the_transposed_weights_to_a_step_per_gate_channel(fmt):
    weight = np.random.default_rng(1).normal(0, 0.2, (2, 64, 24)).astype(np.float32)
    q, scale, zero_point = lstm_weights(weight, WEIGHT_FORMATS[fmt])
    assert q.shape == (2, 24, 64) and scale.shape == zero_point.shape == (2, 64)
    levels = q.astype(np.int32) - zero_point[:, None, :]
    error = levels * scale[:, None, :] - weight.transpose(0, 2, 1)
    assert np.all(np.abs(error) <= scale[:, None, :] / 2 + 1e-7)
    assert np.abs(levels).max() <= WEIGHT_FORMATS[fmt].qmax
    if WEIGHT_FORMATS[fmt].pair_limit:  # the GEMM's pairs, along the reduction (axis 1)
        pairs = np.abs(levels[:, 0::2, :]) + np.abs(levels[:, 1::2, :])
        assert pairs.max() <= WEIGHT_FORMATS[fmt].pair_limit


def test_an_lstm_is_int8_and_the_movement_feeding_only_it_stays_float():
    cleaned = _cleaned(crnn_net())
    selection = select_nodes(cleaned)
    assert "lstm" in selection.int8
    assert selection.fp32["sequence"] == selection.fp32["columns"] == OUTSIDE_INT8


def test_an_lstm_whose_weights_are_not_constants_stays_fp32():
    model = crnn_net()
    weight = next(i for i in model.graph.initializer if i.name == "r_w")
    model.graph.initializer.remove(weight)
    model.graph.input.append(
        helper.make_tensor_value_info("r_w", TensorProto.FLOAT, list(weight.dims))
    )
    selection = select_nodes(_cleaned(model))
    assert selection.fp32["lstm"] == "its weights are not float constants"


def test_an_lstm_stays_fp32_in_a_runtime_without_the_kernel():
    cleaned = _cleaned(crnn_net())
    assert ort_only(cleaned, "onnxruntime") == {}
    assert ort_only(cleaned, "openvino") == {"lstm": "no INT8 LSTM kernel in openvino"}
    plan = replace(plan_for(cleaned, {"lstm"}), runtime="openvino")
    with pytest.raises(ir.passes.PreconditionError, match="no DynamicQuantizeLSTM in openvino"):
        passes.DynamicLstmPass(plan)(cleaned)


def test_kernel_timing_times_the_kernels_the_model_runs():
    cleaned = _cleaned(_lstm_alone())
    lstm = next(n for n in cleaned.graph if n.name == "lstm")
    sequence = np.random.default_rng(2).normal(0, 1, (16, 4, 128)).astype(np.float32)
    fmt = WEIGHT_FORMATS["paired"]
    timed = {
        p: run(_one_node_model(lstm, sequence.shape, p, fmt, Boundaries(False, False)), sequence)
        for p in ("fp32", "int8")
    }
    np.testing.assert_array_equal(timed["fp32"], run(cleaned, sequence))
    lowered = passes.lower_to_qdq(cleaned, QuantPlan({"lstm"}, {}, fmt))
    np.testing.assert_array_equal(timed["int8"], run(lowered, sequence))


def _lstm_alone() -> onnx.ModelProto:
    """crnn_net's LSTM alone: x(16, N, 128) -> y."""
    model = crnn_net()
    lstm = next(n for n in model.graph.node if n.op_type == "LSTM")
    lstm.input[0], lstm.output[0] = "x", "y"
    used = set(lstm.input)
    graph = helper.make_graph(
        [lstm],
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, "N", 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [i for i in model.graph.initializer if i.name in used],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_pipeline_quantizes_a_recogniser_with_its_lstm_in_int8(tmp_path):
    onnx.save(crnn_net(hidden=64), str(tmp_path / "crnn.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "crnn.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    decision = next(d for d in result.decisions if d.name == "lstm")
    assert (decision.precision, decision.reason) == ("int8", DYNAMIC)
    assert "DynamicQuantizeLSTM" in kernel_counts(optimized_graph(result.model))["int8"]
    assert min(result.output_sqnr_db.values()) > 25


def test_a_relu_after_the_lstm_stays_a_relu(tmp_path):
    """The integer LSTM writes float, with no uint8 clamp that could stand for a Relu (here
    before an Abs, which would turn what the Relu zeroes positive)."""
    model = crnn_net(hidden=64)
    steps = next(n for n in model.graph.node if n.name == "steps")
    steps.input[0] = "h_magnitude"
    after = list(model.graph.node).index(steps)
    model.graph.node.insert(after, helper.make_node("Abs", ["h_positive"], ["h_magnitude"]))
    model.graph.node.insert(after, helper.make_node("Relu", ["h"], ["h_positive"], name="relu2"))
    onnx.save(model, str(tmp_path / "crnn.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "crnn.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    decisions = {d.name: d for d in result.decisions}
    assert decisions["lstm"].precision == "int8"
    assert decisions["relu2"].precision == "fp32"
    assert "relu2" in {n.name for n in result.model.graph.node}
    assert min(result.output_sqnr_db.values()) > 25
