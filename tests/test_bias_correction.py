"""Bias correction (quantize/bias_correction.py): each Conv's shift is the mean error it still
sees with the shifts before it applied, and quantize keeps the corrected model only where it
raises the output SQNR."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from graphs import conv_net, images
from onnx import TensorProto, helper, numpy_helper

from quantize import Recipe, bias_correction, quantize
from quantize.bias_correction import bias_shifts, correctable, shifted, waves
from quantize.passes import cleanup
from quantize.pipeline import BIAS_SAMPLES, keep_fp32


def test_shifts_undo_a_known_bias_error_in_the_first_conv_and_leave_the_next_one_alone():
    graph = cleanup(ir.serde.deserialize_model(conv_net()))
    convs = correctable(graph, {n.name for n in graph.graph})
    first, second = convs[0].name, convs[1].name
    error = np.linspace(-0.5, 0.5, convs[0].inputs[2].const_value.shape[0]).astype(np.float32)
    every = {n.name for n in graph.graph}
    wrong = shifted(graph, {first: -error}, every)  # the "INT8" model: conv1's bias off by `error`

    def lowered(shifts):
        return ir.serde.serialize_model(shifted(wrong, shifts, every))

    fp32 = ir.serde.serialize_model(graph)
    shifts = bias_shifts(convs, fp32, lowered, [{"x": images(8)}], threads=1)
    np.testing.assert_allclose(shifts[first], error, atol=1e-5)
    np.testing.assert_allclose(
        shifts[second], 0, atol=1e-5
    )  # conv1 corrected before it is measured


def test_quantize_keeps_the_correction_only_where_the_output_sqnr_gains(tmp_path):
    onnx.save(conv_net(), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    args = (tmp_path / "net.onnx", tmp_path / "x.npy")
    corrected = quantize(*args, Recipe(kernel_timing=False))
    plain = quantize(*args, Recipe(kernel_timing=False, bias_correction=False))
    assert plain.bias_correction == "off"
    measured = corrected.bias_correction
    assert "Conv biases corrected" in measured and measured.endswith(("kept", "not kept"))
    gained = min(corrected.output_sqnr_db.values()) - min(plain.output_sqnr_db.values())
    assert gained > 0 if measured.endswith(": kept") else gained == 0
    assert bool(corrected.calibration.bias_shifts) == measured.endswith(": kept")


def test_a_later_fallback_keeps_the_corrected_biases_and_says_so(tmp_path):
    onnx.save(conv_net(), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    int8_convs = [d.name for d in result.decisions if d.op_type == "Conv" and d.precision == "int8"]
    fallen = keep_fp32(result, {int8_convs[-1]: "a test's fallback"})
    assert fallen.bias_correction == result.bias_correction != "off"
    assert fallen.calibration.bias_shifts == result.calibration.bias_shifts
    assert {int8_convs[0], int8_convs[-1]} <= result.calibration.bias_shifts.keys()
    # the Conv back in FP32 has its own bias again; the INT8 one before it keeps its correction
    assert np.array_equal(
        _bias(fallen.model, int8_convs[-1]), _bias(result.fp32_model, int8_convs[-1])
    )
    assert not np.array_equal(
        _bias(fallen.model, int8_convs[0]), _bias(result.fp32_model, int8_convs[0])
    )


def _bias(model: onnx.ModelProto, conv: str) -> np.ndarray:
    """The float bias `conv` adds, through the DequantizeLinear of an int32 one if quantized."""
    tensors = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    name = next(n for n in model.graph.node if n.name == conv).input[2]
    if name in tensors:
        return tensors[name]
    dq = producers[name]
    return tensors[dq.input[0]] * tensors[dq.input[1]]


def test_convs_on_parallel_branches_are_measured_in_one_wave_after_their_ancestors():
    """x -> a, x -> b, a + b -> c: a and b in the first wave (one lowering), c in the second,
    and c is measured with both branches' errors already undone."""
    rng = np.random.default_rng(3)

    def conv(name, source, out):
        weight = numpy_helper.from_array(
            rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32), f"{name}_w"
        )
        bias = numpy_helper.from_array(np.zeros(4, np.float32), f"{name}_b")
        node = helper.make_node("Conv", [source, weight.name, bias.name], [out], name, pads=[1] * 4)
        return node, [weight, bias]

    a, a_inits = conv("a", "x", "ya")
    b, b_inits = conv("b", "x", "yb")
    c, c_inits = conv("c", "s", "y")
    add = helper.make_node("Add", ["ya", "yb"], ["s"], "add")
    model = helper.make_model(
        helper.make_graph(
            [a, b, add, c],
            "branches",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4, 8, 8])],
            a_inits + b_inits + c_inits,
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    graph = ir.serde.deserialize_model(model)
    convs = correctable(graph, {"a", "b", "c"})
    assert [[n.name for n in wave] for wave in waves(convs)] == [["a", "b"], ["c"]]
    every = {"a", "b", "c"}
    errors = {"a": np.full(4, 0.25, np.float32), "b": np.linspace(-1, 1, 4).astype(np.float32)}
    wrong = shifted(graph, {k: -e for k, e in errors.items()}, every)
    lowerings = []

    def lowered(shifts):
        lowerings.append(dict(shifts))
        return ir.serde.serialize_model(shifted(wrong, shifts, every))

    x = {"x": rng.normal(0, 1, (8, 4, 8, 8)).astype(np.float32)}
    shifts = bias_shifts(convs, model, lowered, [x], threads=1)
    assert [sorted(s) for s in lowerings] == [[], ["a", "b"]]
    for name, error in errors.items():
        np.testing.assert_allclose(shifts[name], error, atol=1e-5)
    np.testing.assert_allclose(shifts["c"], 0, atol=1e-5)


@pytest.mark.parametrize("fixed_batch", [None, 1, 4])
def test_the_shifts_are_measured_on_bias_samples_whatever_the_models_fixed_batch(
    tmp_path, monkeypatch, fixed_batch
):
    """A model exported with its batch fixed at one image is corrected on as many samples as
    any other, not on its first image."""
    model = conv_net()
    if fixed_batch:
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = fixed_batch
    onnx.save(model, str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    measured, measure = [], bias_correction.bias_shifts

    def recorded(convs, fp32, lowered, batches, threads):
        measured.append([len(b["x"]) for b in batches])
        return measure(convs, fp32, lowered, batches, threads)

    monkeypatch.setattr(bias_correction, "bias_shifts", recorded)
    quantize(tmp_path / "net.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    rows = [BIAS_SAMPLES] if fixed_batch is None else [fixed_batch] * (BIAS_SAMPLES // fixed_batch)
    assert measured == [rows]
