"""The command line as a user meets it: bad input gets one line, exit 2, no traceback."""

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest
from graphs import images

from quantize.recipe import AUTO_ALPHA, NARROW_ALPHAS, NARROW_WEIGHTS, Recipe
from quantize.target import host_target, saturates


def quantize(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "quantize", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_success_writes_the_model_and_a_json_summary(conv_model, calib_npz, tmp_path):
    out = tmp_path / "out" / "net.int8.onnx"
    out.parent.mkdir()
    before = _digest(conv_model), _digest(calib_npz)
    run = quantize(
        conv_model,
        "--calib",
        calib_npz,
        "-o",
        out,
        "--calib-samples",
        100,
        "--json",
        "--no-kernel-timing",
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["coverage"]["by_op_type"]["Conv"] == {"int8": 2, "fp32": 0}
    assert (
        summary["kernel_timing"].startswith("off") and summary["recipe"]["target"] == host_target()
    )
    assert summary["fidelity"]["verdict"] == "ok" and "low fidelity" not in run.stderr
    assert summary["size_bytes"]["int8"] < summary["size_bytes"]["fp32"]
    assert summary["calibration"]["samples"] == 100
    model = onnx.load(str(out))
    assert Recipe.from_model(model) == Recipe(kernel_timing=False).resolved()
    assert os.listdir(out.parent) == ["net.int8.onnx"]  # no temporary file left behind
    assert (_digest(conv_model), _digest(calib_npz)) == before


def test_report_writes_html_and_json_timed_at_the_served_batch(conv_model, calib_npz, tmp_path):
    run = quantize(
        *(conv_model, "--calib", calib_npz, "-o", tmp_path / "q.onnx", "--serve-batch", 4),
        *("--report", tmp_path / "r.html"),
    )
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["throughput"]["int8"]["throughput"] > 0 and report["isa"]["int8_gemm_path"]
    assert report["throughput"]["int8"]["batch"] == 4 and report["options"]["serve_batch"] == 4
    html = (tmp_path / "r.html").read_text()
    assert "Per-layer SQNR" in html and "<script" not in html
    # a model this small may well be no faster in INT8 here: either verdict, said in both files
    assert report["speed_check"].startswith(("INT8 ", "the INT8 model was not"))
    assert "a batch of 4)" in report["speed_check"] and "<th>speed check</th>" in html


def _bad(tmp_path, conv_model, calib_npz):
    """Each case: (arguments, text the error must contain)."""
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(np.random.default_rng(0).bytes(3000))
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(conv_model.read_bytes()[:1500])
    nan = tmp_path / "nan.npy"
    data = images(10)
    data[3, 0, 0, 0] = np.inf
    np.save(nan, data)
    wrong_shape = tmp_path / "shape.npy"
    np.save(wrong_shape, np.zeros((10, 3, 8, 8), np.float32))
    wrong_dtype = tmp_path / "dtype.npy"
    np.save(wrong_dtype, np.array(["x"] * 10))
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros((0, 3, 16, 16), np.float32))
    no_names = tmp_path / "names.npz"
    np.savez(no_names, image=images(4))
    import h5py

    with h5py.File(tmp_path / "names.h5", "w") as f:
        f["image"] = images(4)
    not_array = tmp_path / "text.npy"
    not_array.write_text("1,2,3\n")
    out = tmp_path / "o.onnx"
    return [
        (
            [tmp_path / "missing.onnx", "--calib", calib_npz, "-o", out],
            "missing.onnx: no such file",
        ),
        ([junk, "--calib", calib_npz, "-o", out], "junk.onnx: "),
        ([truncated, "--calib", calib_npz, "-o", out], "truncated.onnx: "),
        (
            [conv_model, "--calib", nan, "-o", out],
            "nan.npy: input 'x': sample 3 contains NaN or Inf",
        ),
        ([conv_model, "--calib", wrong_shape, "-o", out], "shape.npy: input 'x': data shape"),
        ([conv_model, "--calib", wrong_dtype, "-o", out], "dtype.npy: "),
        ([conv_model, "--calib", empty, "-o", out], "empty.npy: the calibration set is empty"),
        (
            [conv_model, "--calib", no_names, "-o", out],
            "names.npz: no array for model input(s) x; keys present: image",
        ),
        (
            [conv_model, "--calib", tmp_path / "names.h5", "-o", out],
            "names.h5: no dataset 'x' for model input 'x'",
        ),
        ([conv_model, "--calib", not_array, "-o", out], "text.npy: not a numpy array file"),
        (
            [conv_model, "--calib", calib_npz, "-o", conv_model],
            "net.onnx: the INT8 model would be written over the input model",
        ),
        (
            [conv_model, "--calib", calib_npz, "-o", calib_npz],
            "calib.npz: the INT8 model would be written over the calibration data",
        ),
        (
            [
                conv_model,
                "--calib",
                calib_npz,
                "-o",
                tmp_path / "r.json",
                "--report",
                tmp_path / "r.html",
            ],
            "r.json: the INT8 model would be written over the report's JSON",
        ),
        (
            [conv_model, "--calib", calib_npz, "-o", out, "--target", "avx2", "--weights", "int8"],
            "arguments: full-range int8 weights saturate in the avx2 target's kernels",
        ),
        (
            [conv_model, "--calib", calib_npz, "-o", out, "--max-drop", "-0.5"],
            "arguments: --max-drop -0.5: a drop is 0 or more",
        ),
        (
            [conv_model, "--calib", calib_npz, "-o", out, "--serve-batch", "0"],
            "arguments: serve batch 0: a batch holds 1 sample or more",
        ),
        (
            [conv_model, "--calib", calib_npz, "-o", tmp_path / "nowhere" / "o.onnx"],
            "does not exist",
        ),
        (
            [conv_model, "--calib", tmp_path / "nothing.npz", "-o", out],
            "nothing.npz: calibration data not found",
        ),
    ]


def test_bad_input_gets_one_clear_line(tmp_path, conv_model, calib_npz):
    model_digest, calib_digest = _digest(conv_model), _digest(calib_npz)
    cases = _bad(tmp_path, conv_model, calib_npz)
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:  # each run is mostly imports
        runs = list(pool.map(lambda case: quantize(*case[0]), cases))
    for (args, expected), run in zip(cases, runs):
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2, (args, run.stderr)
        assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
        assert expected in lines[0], (expected, lines[0])
        assert not (tmp_path / "o.onnx").exists()
    assert _digest(conv_model) == model_digest and _digest(calib_npz) == calib_digest


def test_image_directory_with_preprocessing_flags(conv_model, tmp_path):
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(30):  # flat colours survive resizing; the first 24 (calibration) span 0..255
        Image.new("RGB", (24, 20), (min(255, i * 255 // 23),) * 3).save(folder / f"{i:02d}.png")
    run = quantize(
        conv_model,
        "--calib",
        folder,
        "-o",
        tmp_path / "q.onnx",
        "--layout",
        "NCHW",
        "--method",
        "minmax",
        "--scale",
        1 / 255,
        "--mean",
        0.5,
        0.5,
        0.5,
        "--std",
        0.25,
        0.25,
        0.25,
        "--json",
        "--no-kernel-timing",  # about the input's scale: no timing may send this tiny model to FP32
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (
        summary["calibration"]["samples"] == 24 and summary["sqnr_samples"] == "6 held-out samples"
    )
    model = onnx.load(str(tmp_path / "q.onnx"))
    scale = next(
        onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "x_scale"
    )
    assert scale == pytest.approx(4 / 255, rel=1e-4)  # (pixel/255 - 0.5) / 0.25 spans [-2, 2]


def test_an_image_directory_for_a_channels_first_model_needs_no_layout_flag(conv_model, tmp_path):
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(12):
        Image.new("RGB", (16, 16), (i * 20, 255 - i * 20, 128)).save(folder / f"{i:02d}.png")
    run = quantize(
        conv_model, "--calib", folder, "-o", tmp_path / "q.onnx", "--json", "--no-kernel-timing"
    )
    assert run.returncode == 0, run.stderr  # conv_model takes (N, 3, 16, 16): channels first
    assert json.loads(run.stdout)["coverage"]["by_op_type"]["Conv"]["int8"] == 2


def test_a_target_other_than_this_cpus_is_recorded_and_a_saturating_mismatch_warns_in_one_line(
    conv_model, calib_npz, tmp_path
):
    """Made for vnni on a CPU whose kernels saturate, the model's own validation runs ORT's exact
    kernels and says so; made for avx2 anywhere, nothing to warn about."""
    other = "vnni" if saturates(host_target()) else "avx2"
    run = quantize(
        conv_model, "--calib", calib_npz, "-o", tmp_path / "m.onnx", "--target", other, "--json"
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["recipe"]["target"] == other and summary["kernel_timing"].startswith(
        "not measured"
    )
    warnings = [line for line in run.stderr.splitlines() if "warning" in line]
    if other == "vnni":
        assert warnings and all(
            line.startswith("quantize: warning: this model was quantized for vnni")
            for line in warnings
        )
    else:
        assert warnings == []


def test_for_avx2_the_weight_format_is_chosen_and_said_unless_named(
    conv_model, calib_npz, tmp_path
):
    def made(*args):
        run = quantize(conv_model, "--calib", calib_npz, "--target", "avx2", "--json", *args)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)["weights"], run.stderr

    weights, stderr = made("-o", tmp_path / "a.onnx", "--no-kernel-timing")
    assert weights["format"] == "paired" and weights["choice"].startswith(
        "paired met the accuracy goal ("
    )
    assert f"quantize: paired weights: {weights['choice']}" in stderr
    weights, stderr = made("-o", tmp_path / "b.onnx", "--no-kernel-timing", "--weights", "uint8")
    assert weights == {"format": "uint8", "choice": "", "amx_tile_convs": 0}
    assert "weights:" not in stderr
    quantized = [
        t for t in onnx.load(str(tmp_path / "b.onnx")).graph.initializer if "_weight_" in t.name
    ]
    assert {t.data_type for t in quantized if t.name.endswith("_quantized")} == {
        onnx.TensorProto.UINT8
    }


def test_auto_preset_picks_the_transformer_recipe_for_attention_and_cnn_otherwise(
    conv_model, calib_npz, tmp_path
):
    from test_pipeline import attention_net

    onnx.save(attention_net(), str(tmp_path / "attention.onnx"))
    np.save(
        tmp_path / "x.npy", np.random.default_rng(0).normal(0, 1, (40, 5, 16)).astype(np.float32)
    )
    runs = {
        "attention": quantize(
            tmp_path / "attention.onnx",
            "--calib",
            tmp_path / "x.npy",
            "-o",
            tmp_path / "a.onnx",
            "--json",
            "--exclude",
            "query",
            "--no-kernel-timing",
        ),
        "cnn": quantize(
            conv_model,
            "--calib",
            calib_npz,
            "-o",
            tmp_path / "c.onnx",
            "--json",
            "--no-kernel-timing",
        ),
    }
    summaries = {name: json.loads(run.stdout) for name, run in runs.items() if run.returncode == 0}
    assert set(summaries) == set(runs), [run.stderr for run in runs.values()]
    assert summaries["attention"]["preset"] == "transformer" and summaries["cnn"]["preset"] == "cnn"
    overrides = summaries["attention"]["recipe"]["overrides"]
    assert {"Add", "Mul"} <= set(overrides["fp32_outside_convs"])  # the preset's
    assert overrides["fp32"] == ["query"]  # the user's
    assert summaries["cnn"]["recipe"]["overrides"]["fp32"] == []
    # the preset's alpha is auto: a number in the model's recipe, chosen where weights are narrow
    alpha = summaries["attention"]["recipe"]["smoothing"]["alpha"]
    narrow = summaries["attention"]["recipe"]["weights"] in NARROW_WEIGHTS
    assert alpha in (NARROW_ALPHAS if narrow else (AUTO_ALPHA,))
    assert summaries["attention"]["smoothing"].startswith(f"alpha {alpha:g}")
    assert (
        summaries["cnn"]["recipe"]["smoothing"] is None and summaries["cnn"]["smoothing"] == "off"
    )


def _model_with_an_outlier_channel(tmp_path):
    """m.onnx and x.npy: one input channel 1e4 times the rest, which the output depends on as much: per-tensor
    uint8 rounds the small ones away."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1, (16, 4)).astype(np.float32)
    w[0] *= 1e-4
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 16])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    x = rng.normal(0, 1, (80, 16)).astype(np.float32)
    x[:, 0] *= 1e4
    np.save(tmp_path / "x.npy", x)


def test_low_fidelity_is_said_plainly_with_the_worst_layers_and_what_to_try(tmp_path):
    _model_with_an_outlier_channel(tmp_path)
    run = quantize(
        tmp_path / "m.onnx",
        "--calib",
        tmp_path / "x.npy",
        "-o",
        tmp_path / "q.onnx",
        "--json",
        "--method",
        "minmax",
        "--report",
        tmp_path / "r.html",
        "--keep-low-fidelity",
        "--no-kernel-timing",  # about fidelity: no timing may send this tiny model to FP32
    )
    assert run.returncode == 0, run.stderr
    fidelity = json.loads(run.stdout)["fidelity"]
    assert fidelity["verdict"] == "low" and fidelity["output_sqnr_db_min"] < 20
    warning = [line for line in run.stderr.splitlines() if "low fidelity" in line]
    assert (
        len(warning) == 1
        and f"output SQNR {fidelity['output_sqnr_db_min']:.1f} dB" in warning[0]
        and "--exclude" in warning[0]
    )
    assert "Verdict: fidelity is LOW" in (tmp_path / "r.html").read_text()


def test_below_the_fidelity_floor_the_nodes_that_cost_most_go_back_to_fp32_by_default(tmp_path):
    _model_with_an_outlier_channel(tmp_path)
    run = quantize(
        tmp_path / "m.onnx",
        "--calib",
        tmp_path / "x.npy",
        "-o",
        tmp_path / "q.onnx",
        "--json",
        "--method",
        "minmax",
        "--no-kernel-timing",  # about fidelity: no timing may send this tiny model to FP32
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (
        summary["fidelity"]["verdict"] == "ok" and summary["fidelity"]["output_sqnr_db_min"] >= 20
    )
    assert [d["name"] for d in summary["coverage"]["fp32_nodes"]] == ["mm"]
    assert "was below the 20 dB floor: 1 node(s) back to FP32 (mm)" in run.stderr


def _detector_head(tmp_path):
    """d.onnx and f.npy: out = Concat(boxes in pixels, sigmoid class scores) on axis 1, as a
    detector's output."""
    rng = np.random.default_rng(0)
    helper = onnx.helper
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w_box"], ["box"], name="box_mm"),
            helper.make_node("Mul", ["box", "pixels"], ["boxes"], name="to_pixels"),
            helper.make_node("MatMul", ["x", "w_cls"], ["logits"], name="cls_mm"),
            helper.make_node("Sigmoid", ["logits"], ["scores"], name="sigmoid"),
            helper.make_node("Concat", ["boxes", "scores"], ["out"], name="join", axis=1),
        ],
        "head",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, ["N", 10])],
        [
            onnx.numpy_helper.from_array(rng.normal(0, 1, (16, 4)).astype(np.float32), "w_box"),
            onnx.numpy_helper.from_array(rng.normal(0, 1, (16, 6)).astype(np.float32), "w_cls"),
            onnx.numpy_helper.from_array(np.float32(320.0), "pixels"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "d.onnx"))
    np.save(tmp_path / "f.npy", rng.normal(0, 1, (80, 16)).astype(np.float32))


def test_an_output_joining_boxes_and_scores_is_measured_and_shown_part_by_part(tmp_path):
    _detector_head(tmp_path)
    common = [tmp_path / "d.onnx", "--calib", tmp_path / "f.npy", "-o", tmp_path / "q.onnx"]
    run = quantize(*common, "--json", "--no-kernel-timing", "--keep-low-fidelity")
    assert run.returncode == 0, run.stderr
    assert set(json.loads(run.stdout)["output_sqnr_db"]) == {"out[boxes]", "out[scores]"}
    shown = quantize(*common, "--no-kernel-timing", "--keep-low-fidelity")  # the rich summary
    assert shown.returncode == 0, shown.stderr
    assert "output SQNR out[scores]" in shown.stdout


def test_a_model_is_quantized_again_with_the_recipe_it_carries(conv_model, calib_npz, tmp_path):
    first = quantize(
        conv_model,
        "--calib",
        calib_npz,
        "-o",
        tmp_path / "a.onnx",
        "--method",
        "entropy",
        "--exclude",
        "conv2",
        "--target",
        "vnni",
        "--no-kernel-timing",
        "--json",
    )
    assert first.returncode == 0, first.stderr
    again = quantize(
        conv_model,
        "--calib",
        calib_npz,
        "-o",
        tmp_path / "b.onnx",
        "--recipe-from",
        tmp_path / "a.onnx",
        "--json",
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["recipe"] == json.loads(first.stdout)["recipe"]
    assert json.loads(again.stdout)["recipe"]["overrides"]["fp32"] == ["conv2"]
    assert onnx.load(str(tmp_path / "a.onnx")).graph == onnx.load(str(tmp_path / "b.onnx")).graph


def test_a_recipe_from_a_model_quantize_did_not_make_is_one_line(conv_model, calib_npz):
    run = quantize(conv_model, "--calib", calib_npz, "--recipe-from", conv_model)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert (
        run.stderr.strip()
        == f"quantize: error: {conv_model}: the model carries no quantize recipe: it was not made by quantize"
    )


def _stateful_model(path) -> None:
    """y = Relu(x @ W) * rate / 16000 + mean of the state over its layers and width: a scalar
    input and a state whose batch axis is the second, as Silero VAD's."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(6).normal(0, 0.3, (6, 6)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Cast", ["rate"], ["rate_f"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["rate_f", "unit"], ["scale"]),
        helper.make_node("Mul", ["r", "scale"], ["scaled"]),
        helper.make_node("ReduceMean", ["state", "axes"], ["s"], keepdims=0),
        helper.make_node("Unsqueeze", ["s", "last"], ["s1"]),
        helper.make_node("Add", ["scaled", "s1"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "stateful",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 4]),
            helper.make_tensor_value_info("rate", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6])],
        [
            numpy_helper.from_array(weight, "w"),
            numpy_helper.from_array(np.float32(16000), "unit"),
            numpy_helper.from_array(np.array([0, 2], np.int64), "axes"),
            numpy_helper.from_array(np.array([1], np.int64), "last"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))


def test_whole_feeds_calibrate_a_model_with_a_scalar_input_and_a_state(tmp_path):
    from calibration import save_feeds

    _stateful_model(tmp_path / "vad.onnx")
    rng = np.random.default_rng(7)
    feeds = [
        {
            "x": rng.normal(size=(4, 6)).astype(np.float32),
            "state": rng.normal(size=(2, 4, 4)).astype(np.float32),
            "rate": np.array(16000),
        }
        for _ in range(24)
    ]
    save_feeds(tmp_path / "feeds.npz", feeds)
    run = quantize(
        tmp_path / "vad.onnx",
        "--calib",
        tmp_path / "feeds.npz",
        "-o",
        tmp_path / "out.onnx",
        "--json",
        "--no-kernel-timing",
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["coverage"]["by_op_type"]["Gemm"] == {"int8": 1, "fp32": 0}  # the MatMul
    assert summary["calibration"]["samples"] > 0
    stacked = tmp_path / "stacked.npz"  # the same data as rows: the state's batch is not axis 0
    np.savez(stacked, x=np.zeros((8, 6), np.float32), state=np.zeros((2, 8, 4), np.float32))
    run = quantize(tmp_path / "vad.onnx", "--calib", stacked)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and str(stacked) in run.stderr
