"""OpenVINO as the runtime a model is made for: it runs quantize's Q/DQ models in INT8, and
`--runtime openvino` makes the speed check and the report time the model there."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from graphs import conv_net, images

from quantize import Recipe, keep_fp32_unless_faster, quantize, report
from quantize.report import openvino_offer
from quantize.runtime import (
    CompileError,
    OpenVINOSession,
    runtime_session,
    served_sessions,
    session,
)
from quantize.validate import sqnr_db


def test_openvino_runs_an_int8_model_as_onnx_runtime_does(tmp_path):
    onnx.save(conv_net(channels=16), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    feeds = result.held_out[0]
    in_ort = session(result.model).run(None, feeds)[0]
    in_openvino = OpenVINOSession(result.model, threads=1).run(None, feeds)[0]
    fp32 = session(result.fp32_model).run(None, feeds)[0]
    assert sqnr_db(in_ort, in_openvino) > 30  # the same INT8 model; rounding may differ
    assert abs(sqnr_db(fp32, in_openvino) - sqnr_db(fp32, in_ort)) < 3


def test_a_model_made_for_openvino_is_timed_there_and_says_so(conv_model, calib_npz, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "quantize", str(conv_model), "--calib", str(calib_npz)]
        + ["-o", str(tmp_path / "q.onnx"), "--runtime", "openvino"]
        + ["--report", str(tmp_path / "r.html"), "--json"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["recipe"]["runtime"] == "openvino"
    assert Recipe.from_model(onnx.load(tmp_path / "q.onnx")).runtime == "openvino"
    assert (
        report["kernel_timing"].startswith("not measured") and "openvino" in report["kernel_timing"]
    )
    assert "in openvino" in report["speed_check"]
    assert report["throughput"]["int8"]["throughput"] > 0
    assert report["openvino"] is None  # already timed there: nothing to offer


def test_the_report_times_a_model_made_for_onnx_runtime_in_openvino_too(
    conv_model, calib_npz, tmp_path
):
    run = subprocess.run(
        [sys.executable, "-m", "quantize", str(conv_model), "--calib", str(calib_npz)]
        + ["-o", str(tmp_path / "q.onnx"), "--report", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    offer, in_onnxruntime = report["openvino"], report["throughput"]["int8"]
    assert offer["throughput"]["batch"] == in_onnxruntime["batch"]
    ratio = offer["throughput"]["throughput"] / in_onnxruntime["throughput"]
    assert offer["over_onnxruntime"] == pytest.approx(ratio)
    assert offer["advice"].startswith(f"OpenVINO runs this INT8 model {ratio:.2f}x as fast")
    assert "<th>OpenVINO</th>" in (tmp_path / "r.html").read_text()
    assert "OpenVINO" in run.stdout  # the summary's row


@pytest.mark.parametrize("ratio, offered", [(1.06, True), (1.04, False), (0.5, False)])
def test_runtime_openvino_is_offered_only_where_openvino_runs_the_int8_model_faster(ratio, offered):
    offer = openvino_offer({"throughput": 100.0 * ratio}, {"throughput": 100.0})
    assert offer["over_onnxruntime"] == pytest.approx(ratio)
    assert ("quantize with --runtime openvino" in offer["advice"]) is offered


def test_a_report_whose_model_openvino_cannot_run_says_so_and_times_it_in_onnx_runtime(
    conv_model, calib_npz, monkeypatch
):
    result = quantize(conv_model, calib_npz, Recipe(kernel_timing=False))

    def cannot_run(self, output_names, feeds):
        raise RuntimeError("Exception from src/inference:\nno kernel for com.microsoft.Op")

    monkeypatch.setattr(OpenVINOSession, "run", cannot_run)
    timed = report.evaluate(report.summarize(result), result, seconds=0.2)
    assert timed["openvino"] == {"advice": "not timed in OpenVINO: no kernel for com.microsoft.Op"}
    assert timed["throughput"].keys() == {"fp32", "int8", "speedup"}


def test_a_model_openvino_cannot_read_is_one_compile_error_line():
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    unknown = onnx.helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    model = onnx.helper.make_model(
        onnx.helper.make_graph([unknown], "g", [x], [y]),
        opset_imports=[
            onnx.helper.make_opsetid("", 17),
            onnx.helper.make_opsetid("com.example", 1),
        ],
    )
    with pytest.raises(CompileError, match="^OpenVINO cannot read the model: .+"):
        OpenVINOSession(model)


def test_the_speed_check_of_a_model_made_for_openvino_times_it_compiled_for_the_served_batch(
    tmp_path, monkeypatch
):
    """OpenVINO compiled for any shape ran the 3DGAN generator's INT8 model slower than its FP32
    graph, and compiled for the served batch faster: the check times what will be served."""
    onnx.save(conv_net(channels=16), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", Recipe(runtime="openvino"))
    opened = []

    def recording_session(model, threads=0, runtime="onnxruntime", shapes=None):
        opened.append(runtime_session(model, threads, runtime, shapes=shapes))
        return opened[-1]

    monkeypatch.setattr("quantize.runtime.runtime_session", recording_session)
    keep_fp32_unless_faster(result, seconds=0.2)
    (served,) = [list(array.shape) for array in result.served_feeds.values()]
    assert opened and all(isinstance(s, OpenVINOSession) for s in opened)
    assert all(s.get_inputs()[0].shape == served for s in opened)


def test_an_openvino_session_compiled_for_shapes_has_static_inputs():
    model = conv_net(channels=4)
    name = model.graph.input[0].name
    assert OpenVINOSession(model).get_inputs()[0].shape[0] is None
    compiled = OpenVINOSession(model, shapes={name: (3, 3, 16, 16)})
    assert compiled.get_inputs()[0].shape == [3, 3, 16, 16]


def test_the_fidelity_of_a_model_made_for_openvino_is_measured_as_openvino_runs_it(
    tmp_path, monkeypatch
):
    onnx.save(conv_net(channels=16), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    opened = []

    def recording_session(model, threads=0, runtime="onnxruntime", shapes=None):
        opened.append((runtime, shapes))
        return runtime_session(model, threads, runtime, shapes=shapes)

    monkeypatch.setattr("quantize.runtime.runtime_session", recording_session)
    recipe = Recipe(runtime="openvino", kernel_timing=False)
    result = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", recipe)
    # the INT8 model's outputs, compiled for the held-out batches' shapes as OpenVINO serves
    # them; FP32's reference is ONNX Runtime's
    served = {tuple(x.shape) for b in result.held_out for x in b.values()}
    assert {tuple(s["x"]) for r, s in opened if r == "openvino"} == served
    fp32 = session(result.fp32_model)
    got = np.concatenate(
        [
            OpenVINOSession(result.model, shapes={"x": b["x"].shape}).run(None, b)[0]
            for b in result.held_out
        ]
    )
    reference = np.concatenate([fp32.run(None, b)[0] for b in result.held_out])
    (measured,) = result.output_sqnr_db.values()
    assert measured == pytest.approx(sqnr_db(reference, got), abs=1e-4)
    assert result.sqnr_samples.endswith("run by openvino")


def test_openvino_serves_each_input_shape_from_a_model_compiled_for_it_onnx_runtime_from_one():
    model = conv_net(channels=4)
    name = model.graph.input[0].name
    feeds = [{name: images(n)} for n in (2, 3, 2)]
    in_openvino = served_sessions(model, feeds, runtime="openvino")
    assert [s.get_inputs()[0].shape for s in in_openvino] == [
        list(images(n).shape) for n in (2, 3, 2)
    ]
    assert in_openvino[0] is in_openvino[2] and in_openvino[0] is not in_openvino[1]
    in_ort = served_sessions(model, feeds)
    assert in_ort[0] is in_ort[1] is in_ort[2]


def test_a_profiled_openvino_session_says_which_kernels_ran_its_int8_convs(tmp_path):
    onnx.save(conv_net(channels=16), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(64))
    result = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    feeds = result.held_out[0]
    shapes = {name: array.shape for name, array in feeds.items()}
    profiled = OpenVINOSession(result.model, 1, shapes, profile=True)
    profiled.run(None, feeds)
    convs = {
        kernel: n for (op, kernel), (n, _) in profiled.kernel_times().items() if op == "Convolution"
    }
    int8_convs = sum(n for kernel, n in convs.items() if kernel.lower().endswith("i8"))
    assert int8_convs == sum(1 for node in result.fp32_model.graph.node if node.op_type == "Conv")


def test_a_model_made_for_openvino_reads_its_convs_inputs_from_zero_and_runs_them_in_int8(
    tmp_path,
):
    """The first Conv reads the signed input x at a zero point: made for OpenVINO, it reads it
    from zero (its bias and padding hold the rest), which OpenVINO runs as it runs ONNX
    Runtime's form, in INT8."""
    onnx.save(conv_net(channels=16), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(64))
    recipe = Recipe(runtime="openvino", kernel_timing=False)
    result = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", recipe)
    producers = {out: node for node in result.model.graph.node for out in node.output}
    constants = {c.name: onnx.numpy_helper.to_array(c) for c in result.model.graph.initializer}
    convs = [node for node in result.model.graph.node if node.op_type == "Conv"]
    assert all(constants[producers[conv.input[0]].input[2]] == 0 for conv in convs)
    assert "Pad" in {node.op_type for node in result.model.graph.node}
    feeds = result.held_out[0]
    profiled = OpenVINOSession(result.model, 1, {"x": feeds["x"].shape}, profile=True)
    in_openvino = profiled.run(None, feeds)[0]
    kernels = [k for (op, k), _ in profiled.kernel_times().items() if op == "Convolution"]
    assert kernels and all(kernel.lower().endswith("i8") for kernel in kernels)
    assert sqnr_db(session(result.model).run(None, feeds)[0], in_openvino) > 30


def _qdq_model(scale: np.float32, zero: np.uint8) -> onnx.ModelProto:
    """x -> QuantizeLinear -> DequantizeLinear -> y, one uint8 activation at (scale, zero)."""
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            onnx.helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ],
        "qdq",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [5])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [5])],
        [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(zero, "z")],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])


def test_symmetric_activations_keep_each_range_and_set_zero_points_to_zero():
    from benchmarks.openvino_activations import symmetric_activations

    model = _qdq_model(np.float32(0.02), np.uint8(40))
    x = {"x": np.array([-0.8, -0.1, 0.0, 1.0, 4.3], np.float32)}  # [-0.8, 4.3]: 40 and 215 steps
    rewritten = symmetric_activations(model)
    constants = {c.name: onnx.numpy_helper.to_array(c) for c in rewritten.graph.initializer}
    assert constants["z"] == 0 and constants["z"].dtype == np.int8
    assert np.isclose(constants["s"], 0.02 * 215 / 127)
    np.testing.assert_allclose(
        session(rewritten).run(None, x)[0], x["x"], atol=constants["s"] / 2 + 1e-6
    )
    assert onnx.numpy_helper.to_array(model.graph.initializer[1]) == 40  # the input is unchanged


def test_zero_points_in_convs_undoes_the_move_into_bias_and_padding(tmp_path):
    from benchmarks.openvino_activations import zero_points_in_convs

    onnx.save(conv_net(channels=16), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(64))
    recipe = Recipe(runtime="openvino", kernel_timing=False)
    model = quantize(tmp_path / "net.onnx", tmp_path / "x.npy", recipe).model
    restored = zero_points_in_convs(model)
    nodes = {node.name: node for node in restored.graph.node}
    constants = {c.name: onnx.numpy_helper.to_array(c) for c in restored.graph.initializer}
    producers = {out: node for node in restored.graph.node for out in node.output}
    assert "Pad" not in {node.op_type for node in restored.graph.node}
    assert constants[producers[nodes["conv1"].input[0]].input[2]] != 0
    pads = next(a for a in nodes["conv1"].attribute if a.name == "pads")
    assert list(pads.ints) == [1, 1, 1, 1]
    x = {"x": images(8)}
    moved, kept = session(model).run(None, x)[0], session(restored).run(None, x)[0]
    assert np.abs(moved - kept).max() < 1e-4 * np.abs(moved).max()
