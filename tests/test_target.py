"""Targets: which INT8 path this CPU takes, models made for each, and the AVX2 path checked on
every machine by running it under qemu's emulation of an AVX2-only CPU (../shared/tools/as-cpu)."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from graphs import conv_net, images, skip_outside_ci
from onnx import TensorProto, helper, numpy_helper

from quantize import Recipe, RunOptions, passes, quantize, runtime, target
from quantize.passes.insert_qdq import reduction_rows
from quantize.plan import QuantPlan
from quantize.runtime import TargetMismatchWarning
from quantize.target import WEIGHT_FORMATS
from quantize.validate import sqnr_db

AS_CPU = Path(__file__).resolve().parents[2] / "shared" / "tools" / "as-cpu"


def run_as_avx2(script: str, *args) -> subprocess.CompletedProcess:
    """`python -c script args` on qemu's AVX2-only CPU, with this project importable."""
    return subprocess.run(
        [str(AS_CPU), "avx2", sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[1],
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1])),
    )


def saturating_net(group: int = 1, out_channels: int = 8) -> onnx.ModelProto:
    """A Conv of same-signed weights over inputs in [0, 1]: with full-range int8 weights, most
    pairs of u8 x s8 products exceed an int16, so a saturating kernel visibly goes wrong."""
    rng = np.random.default_rng(3)
    weight = rng.uniform(0.6, 1.0, (out_channels, 16 // group, 3, 3)).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=group, name="conv")
    graph = helper.make_graph(
        [conv],
        "saturating",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", out_channels, 8, 8])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def quantized_weights(model: onnx.ModelProto) -> list[np.ndarray]:
    return [
        numpy_helper.to_array(t)
        for t in model.graph.initializer
        if t.name.endswith("_weight_quantized")
    ]


def test_the_cpu_is_named_with_its_family_and_model():
    two_cpus = "".join(
        f"processor\t: {i}\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
        "model name\t: AMD EPYC\nflags\t\t: fpu avx2\n\n"
        for i in range(2)
    )
    assert target.cpu_name(two_cpus) == "AMD EPYC (family 26, model 2)"
    assert target.cpu_name("model name\t: Some CPU\n") == "Some CPU"
    assert target.host_isa()["cpu"] == target.cpu_name(Path("/proc/cpuinfo").read_text())


def test_weight_formats_per_target():
    assert target.default_weights("avx2") == "paired"
    assert target.default_weights("avx2", runtime="openvino") == "int7"
    assert target.default_weights("vnni") == target.default_weights("amx") == "int8"
    int8, paired, int7, uint8 = (
        target.WEIGHT_FORMATS[f] for f in ("int8", "paired", "int7", "uint8")
    )
    assert 255 * int7.qmax * 2 <= np.iinfo(np.int16).max < 255 * int8.qmax * 2
    assert 255 * paired.pair_limit <= np.iinfo(np.int16).max and paired.qmax == int8.qmax
    assert Recipe(target="avx2", runtime="openvino").resolved().weights == "int7"
    with pytest.raises(ValueError, match="openvino on the avx2 target may pair them otherwise"):
        Recipe(target="avx2", weights="paired", runtime="openvino")
    assert uint8.zero_point - uint8.qmax >= 0 and uint8.zero_point + uint8.qmax <= 255
    with pytest.raises(ValueError, match="unknown target 'sse'"):
        target.default_weights("sse")
    with pytest.raises(ValueError, match="unknown target"):
        Recipe(target="avx512")
    with pytest.raises(ValueError, match="int8 weights saturate in the avx2 target's kernels"):
        Recipe(target="avx2", weights="int8")
    with pytest.raises(ValueError, match="unknown weight format 'int4'"):
        Recipe(weights="int4")
    assert Recipe(target="vnni", weights="uint8").resolved().weights == "uint8"


def test_cpuid_reads_what_the_kernel_reports_and_the_probe_agrees_with_the_target():
    """Natively, CPUID and /proc/cpuinfo see the same CPU; the target follows the probe."""
    regs = target._cpuid_reader()
    assert regs is not None
    _, ebx, ecx, edx = regs(0, 0)
    vendor = b"".join(r.to_bytes(4, "little") for r in (ebx, edx, ecx)).decode()
    assert vendor in ("GenuineIntel", "AuthenticAMD"), vendor
    core = {"avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_tile", "amx_int8", "avx_vnni"}
    assert target.cpu_flags() & core == target._proc_flags() & core
    assert target.saturates(target.host_target()) == target.probe_saturates()
    assert target.host_isa()["target"] == target.host_target()


@pytest.mark.parametrize(
    "made_for, weights, dtype, lo, hi",
    [
        ("avx2", "int7", np.int8, -64, 64),
        ("avx2", "auto", np.int8, None, None),  # paired: within +-127, each pair within 128
        ("vnni", "auto", np.int8, -127, 127),
        ("amx", "auto", np.int8, -127, 127),
        ("avx2", "uint8", np.uint8, 1, 255),
        ("vnni", "int7", np.int8, -64, 64),
    ],
)
def test_a_model_keeps_its_weight_format_and_records_it_with_the_target(
    tmp_path, made_for, weights, dtype, lo, hi
):
    onnx.save(conv_net(channels=8), str(tmp_path / "net.onnx"))
    np.save(tmp_path / "x.npy", images(40))
    result = quantize(
        tmp_path / "net.onnx",
        tmp_path / "x.npy",
        Recipe(target=made_for, weights=weights, kernel_timing=False),
    )
    quantized = quantized_weights(result.model)
    assert len(quantized) == 3 and all(w.dtype == dtype for w in quantized)
    if lo is None:
        assert result.recipe.weights == "paired"
        assert max(np.abs(w).max() for w in quantized) <= 127
        assert max(pair_sums(rows).max() for rows in weight_rows(result.model)) <= 128
    else:  # each channel's largest weight lands on an edge of the range
        assert min(w.min() for w in quantized) == lo and max(w.max() for w in quantized) == hi
    metadata = {p.key: p.value for p in result.model.metadata_props}
    recorded = json.loads(metadata["quantize.recipe"])
    assert metadata["quantize.target"] == recorded["target"] == made_for
    assert metadata["quantize.weights"] == recorded["weights"] == result.recipe.weights != "auto"
    assert min(result.output_sqnr_db.values()) > 25


def test_only_a_depthwise_conv_keeps_full_int8_weights_in_an_avx2_model(tmp_path):
    """MLAS's depthwise kernel (one input and one output channel per group) widens to int16
    before it multiplies; a grouped Conv with two outputs per group runs as GEMMs, which
    saturate."""
    np.save(
        tmp_path / "x.npy",
        np.random.default_rng(0).uniform(0, 1, (32, 16, 8, 8)).astype(np.float32),
    )
    for out_channels in (16, 32):
        onnx.save(saturating_net(group=16, out_channels=out_channels), str(tmp_path / "g.onnx"))
        recipe = Recipe(target="avx2", kernel_timing=False)
        model = quantize(tmp_path / "g.onnx", tmp_path / "x.npy", recipe).model
        (w,), (rows,) = quantized_weights(model), weight_rows(model)
        largest_pair = pair_sums(rows).max()
        if out_channels == 16:  # depthwise: full int8, pairs unbounded
            assert np.abs(w).max() == 127 and largest_pair > 128
        else:
            assert largest_pair <= 128


def test_auto_is_this_machines_target(conv_model, calib_npz):
    result = quantize(
        conv_model, calib_npz, Recipe(kernel_timing=False), RunOptions(calib_samples=40)
    )
    assert result.recipe.target == target.host_target()
    assert {p.key: p.value for p in result.model.metadata_props}[
        "quantize.target"
    ] == target.host_target()


def test_convs_that_share_one_weight_tensor_run_on_the_exact_kernels(tmp_path):
    """ORT's exact kernels convert int8 weights to uint8 once per reader, under one name made
    from the weights': readers sharing quantized weights would make the session fail to load."""
    rng = np.random.default_rng(0)
    convs = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1], name="first"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1], name="second"),
    ]
    graph = helper.make_graph(
        convs,
        "tied",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 8, 8])],
        [numpy_helper.from_array(rng.normal(0, 0.3, (8, 8, 3, 3)).astype(np.float32), "w")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        str(tmp_path / "t.onnx"),
    )
    x = rng.normal(size=(36, 8, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x[:32])
    vnni = quantize(
        tmp_path / "t.onnx", tmp_path / "x.npy", Recipe(target="vnni", kernel_timing=False)
    ).model
    exact = runtime.session(vnni, exact_kernels=True).run(None, {"x": x[32:]})[0]
    expected = runtime.session(onnx.load(tmp_path / "t.onnx")).run(None, {"x": x[32:]})[0]
    assert sqnr_db(expected, exact) > 25


def test_a_full_range_model_on_a_saturating_cpu_warns_naming_both_and_runs_exact_kernels(
    tmp_path, monkeypatch
):
    onnx.save(saturating_net(), str(tmp_path / "s.onnx"))
    x = np.random.default_rng(0).uniform(0, 1, (32, 16, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    vnni = quantize(
        tmp_path / "s.onnx", tmp_path / "x.npy", Recipe(target="vnni", kernel_timing=False)
    ).model
    monkeypatch.setattr(runtime, "host_target", lambda: "avx2")
    with pytest.warns(TargetMismatchWarning, match="quantized for vnni .* INT8 path is avx2"):
        sess = runtime.session(vnni)
    assert sess.get_session_options().get_session_config_entry(target.EXACT_U8U8_OPTION) == "1"
    made_for_avx2 = quantize(
        tmp_path / "s.onnx", tmp_path / "x.npy", Recipe(target="avx2", kernel_timing=False)
    ).model
    all_bits = quantize(
        tmp_path / "s.onnx",
        tmp_path / "x.npy",
        Recipe(target="vnni", weights="uint8", kernel_timing=False),
    ).model
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runtime.session(made_for_avx2)
        runtime.session(all_bits)  # uint8 weights: ORT's U8U8 kernels without being asked


EMULATED_RUN = """
import json, sys, warnings
import numpy as np, onnxruntime as ort
from quantize import runtime, target
x, out, models = np.load(sys.argv[1]), sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
plain = lambda path: ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    through_runtime = runtime.session(models["vnni"]).run(None, {"x": x})[0]
np.savez(out, vnni_runtime=through_runtime, **{name: plain(path) for name, path in models.items()})
print(json.dumps({"isa": target.host_isa(), "warnings": [str(w.message) for w in caught]}))
"""


@skip_outside_ci(not AS_CPU.exists(), "needs ../shared/tools/as-cpu beside the project")
def test_under_avx2_emulation_the_avx2_model_is_exact_and_a_vnni_model_is_caught(tmp_path):
    """MLAS takes its AVX2 kernels under the emulated CPU whatever the host: the probe sees the
    saturation, the models made for avx2 (int7 and uint8 weights) match FP32, the one made for
    vnni saturates when run plainly and is exact again through quantize's runtime."""
    onnx.save(saturating_net(), str(tmp_path / "s.onnx"))
    x = np.random.default_rng(0).uniform(0, 1, (32, 16, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    onnx.save(saturating_net(group=16, out_channels=16), str(tmp_path / "depthwise.onnx"))
    recipes = {
        "avx2": Recipe(target="avx2", kernel_timing=False),
        "avx2_uint8": Recipe(target="avx2", weights="uint8", kernel_timing=False),
        "vnni": Recipe(target="vnni", kernel_timing=False),
        "avx2_depthwise": Recipe(target="avx2", kernel_timing=False),
    }
    for name, recipe in recipes.items():
        source = tmp_path / ("depthwise.onnx" if name == "avx2_depthwise" else "s.onnx")
        model = quantize(source, tmp_path / "x.npy", recipe).model
        onnx.save(model, str(tmp_path / f"{name}.onnx"))
    run = run_as_avx2(
        EMULATED_RUN,
        tmp_path / "x.npy",
        tmp_path / "out.npz",
        *(f"{name}={tmp_path / name}.onnx" for name in recipes),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["isa"]["target"] == "avx2" and report["isa"]["u8s8_saturates"]
    assert not any(
        f.startswith("avx512") for f in report["isa"]["isa_flags"]
    )  # CPUID of the emulated CPU, not the host's
    assert len(report["warnings"]) == 1 and "quantized for vnni" in report["warnings"][0]
    reference = runtime.session(tmp_path / "s.onnx").run(None, {"x": x})[0]
    out = np.load(tmp_path / "out.npz")
    exact = sqnr_db(reference, out["avx2"])
    assert exact > 30
    assert sqnr_db(reference, out["avx2_uint8"]) > exact  # all 8 bits, and exact
    assert sqnr_db(reference, out["vnni"]) < exact - 10  # saturated
    assert sqnr_db(reference, out["vnni_runtime"]) > 30
    # int7 guards the GEMM kernels only: a depthwise Conv's full-range int8 weights are exact
    depthwise = onnx.load(str(tmp_path / "avx2_depthwise.onnx"))
    assert max(np.abs(w).max() for w in quantized_weights(depthwise)) == 127
    in_float = ort.SessionOptions()
    in_float.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unfused = ort.InferenceSession(
        str(tmp_path / "avx2_depthwise.onnx"), in_float, providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})[0]  # DequantizeLinear, float Conv, QuantizeLinear: no integer kernel
    assert sqnr_db(unfused, out["avx2_depthwise"]) > 40


def alternating_net(kind: str) -> tuple[onnx.ModelProto, np.ndarray]:
    """A Conv or MatMul whose weights, along the reduction in MLAS's order, run large, small,
    small, large, and an input in [0, 1]: each pair the kernel multiplies together holds one
    large weight, so paired weights may pass int7's +-64, and any other pairing would put two
    large ones together and saturate. `conv16` takes MLAS's symmetric Conv kernel (input channels
    a multiple of 4), `conv3` its im2col GEMM (pairs span kernel positions), `matmul` its GEMM."""
    rng = np.random.default_rng(5)
    channels, k = {"conv16": (16, 9 * 16), "conv3": (16, 9 * 3), "matmul": (16, 32)}[kind]
    pattern = np.array([1.0, 0.05, 0.05, 1.0])[np.arange(k) % 4]
    rows = pattern * rng.uniform(0.9, 1.0, (channels, k))
    if kind == "matmul":
        weight, x_shape, y_shape = rows.T, [32, 32], ["N", channels]
        node = helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")
    else:
        in_channels = k // 9
        weight = np.moveaxis(rows.reshape(channels, 3, 3, in_channels), -1, 1)
        x_shape, y_shape = [32, in_channels, 8, 8], ["N", channels, 8, 8]
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")
    graph = helper.make_graph(
        [node],
        kind,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape[1:]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(weight.astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.random.default_rng(0).uniform(0, 1, x_shape).astype(np.float32)
    return model, x


def weight_rows(model: onnx.ModelProto) -> list[np.ndarray]:
    """Each quantized weight of `model`, as MLAS reduces it, in graph order."""
    graph = ir.from_proto(model).graph
    return [
        reduction_rows(
            node, graph.initializers[f"{node.name}_weight_quantized"].const_value.numpy()
        )
        for node in graph
        if f"{node.name}_weight_quantized" in graph.initializers
    ]


def pair_sums(rows: np.ndarray, shift: int = 0) -> np.ndarray:
    """|r[2j + shift]| + |r[2j + 1 + shift]| of each row, zero-padded to whole pairs."""
    rows = np.abs(rows[:, shift:].astype(int))
    rows = np.pad(rows, ((0, 0), (0, rows.shape[1] % 2)))
    return rows.reshape(len(rows), -1, 2).sum(-1)


def reduction_rotated(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its integer weights moved one step along the reduction (MLAS's order), so
    that the kernel pairs each weight with its other neighbour."""
    rotated = ir.from_proto(model)
    for node in rotated.graph:
        init = rotated.graph.initializers.get(f"{node.name}_weight_quantized")
        if init is not None:
            q = init.const_value.numpy()
            rolled = np.roll(reduction_rows(node, q), 1, axis=1)
            q = (  # a Conv's rows back to (out, in, kernel); a MatMul's back to (K, N)
                np.moveaxis(rolled.reshape(q.shape[0], *q.shape[2:], q.shape[1]), -1, 1)
                if q.ndim == 4
                else rolled.T
            )
            init.const_value = ir.tensor(np.ascontiguousarray(q), name=init.name)
    return ir.to_proto(rotated)


PLAIN_RUNS = """
import sys
import numpy as np, onnxruntime as ort
feeds, out = np.load(sys.argv[1]), sys.argv[2]
run = lambda name, path: ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
    None, {"x": feeds[name.split("_")[0]]})[0]
np.savez(out, **{name: run(name, path) for name, path in (a.split("=", 1) for a in sys.argv[3:])})
"""


def plain_runs_as_avx2(tmp_path, feeds: dict, models: dict) -> dict:
    """Each model (name -> path) run by plain ORT under qemu's AVX2 CPU on the feed its name
    starts with (before any "_"): name -> output."""
    np.savez(tmp_path / "feeds.npz", **feeds)
    run = run_as_avx2(
        PLAIN_RUNS,
        tmp_path / "feeds.npz",
        tmp_path / "out.npz",
        *(f"{name}={path}" for name, path in models.items()),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return dict(np.load(tmp_path / "out.npz"))


@skip_outside_ci(not AS_CPU.exists(), "needs ../shared/tools/as-cpu beside the project")
def test_under_avx2_emulation_paired_weights_are_exact_on_every_kernel_mlas_pairs_them_in(
    tmp_path,
):
    """An avx2 model's paired weights use int8's range where their pairs allow it, and MLAS's
    AVX2 kernels (symmetric Conv, im2col Conv, GEMM) compute them as the float Conv or MatMul
    of the dequantized weights does; the same weights one step along, which MLAS pairs with
    their other neighbours, saturate."""
    feeds, models, unfused = {}, {}, {}
    in_float = ort.SessionOptions()
    in_float.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for kind in ("conv16", "conv3", "matmul"):
        model, feeds[kind] = alternating_net(kind)
        onnx.save(model, str(tmp_path / f"{kind}.onnx"))
        np.save(tmp_path / f"{kind}_x.npy", feeds[kind])
        quantized = quantize(
            tmp_path / f"{kind}.onnx",
            tmp_path / f"{kind}_x.npy",
            Recipe(target="avx2", kernel_timing=False),
        )
        assert quantized.recipe.weights == "paired"
        (q,), (rows,) = quantized_weights(quantized.model), weight_rows(quantized.model)
        assert np.abs(q).max() > 64  # past int7's range, which any pairing allows
        assert pair_sums(rows).max() <= 128  # 255 * 128 fits an int16
        assert pair_sums(rows, shift=1).max() * 255 > np.iinfo(np.int16).max
        for name, made in (
            (kind, quantized.model),
            (f"{kind}_rotated", reduction_rotated(quantized.model)),
        ):
            models[name] = tmp_path / f"{name}.onnx"
            onnx.save(made, str(models[name]))
            unfused[name] = ort.InferenceSession(
                str(models[name]), in_float, providers=["CPUExecutionProvider"]
            ).run(None, {"x": feeds[kind]})[0]  # DequantizeLinear, float op: no integer kernel
    out = plain_runs_as_avx2(tmp_path, feeds, models)
    for kind in feeds:
        assert sqnr_db(unfused[kind], out[kind]) > 40, kind
        assert sqnr_db(unfused[f"{kind}_rotated"], out[f"{kind}_rotated"]) < 25, kind


def saturating_lstm() -> tuple[onnx.ModelProto, np.ndarray]:
    """An LSTM over inputs in [0, 1] whose input weights are one positive value per gate row
    (centred by the bias): in int8 each is 127, and most pairs of u8 x s8 products exceed an
    int16."""
    rng = np.random.default_rng(4)
    hidden, inputs = 16, 64
    weight = np.full((1, 4 * hidden, inputs), 0.05, np.float32)
    recurrence = rng.normal(0, 0.1, (1, 4 * hidden, hidden)).astype(np.float32)
    bias = np.concatenate([np.full(4 * hidden, -0.05 * inputs / 2), np.zeros(4 * hidden)])
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["x", "w", "r", "b"], ["y"], hidden_size=hidden, name="lstm")],
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(weight, "w"),
            numpy_helper.from_array(recurrence, "r"),
            numpy_helper.from_array(bias[None].astype(np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, rng.uniform(0, 1, (8, 4, inputs)).astype(np.float32)


@skip_outside_ci(not AS_CPU.exists(), "needs ../shared/tools/as-cpu beside the project")
def test_under_avx2_emulation_an_lstms_paired_weights_are_exact_and_int8_ones_saturate(tmp_path):
    """ONNX Runtime's integer LSTM multiplies in MLAS's U8S8 GEMM: on AVX2 the paired weights
    of an avx2 model compute what the FP32 LSTM does, to rounding; full-range int8 saturates."""
    model, x = saturating_lstm()
    reference = runtime.session(model).run(None, {"x": x})[0]
    cleaned = passes.cleanup(ir.serde.deserialize_model(model))
    models = {}
    for fmt in ("int8", "paired"):
        plan = QuantPlan({"lstm"}, {}, WEIGHT_FORMATS[fmt])
        models[f"lstm_{fmt}"] = tmp_path / f"{fmt}.onnx"
        lowered = passes.lower_to_qdq(cleaned.clone(), plan)
        onnx.save(ir.serde.serialize_model(lowered), str(models[f"lstm_{fmt}"]))
    out = plain_runs_as_avx2(tmp_path, {"lstm": x}, models)
    exact = sqnr_db(reference, out["lstm_paired"])
    assert exact > 30
    assert sqnr_db(reference, out["lstm_int8"]) < exact - 10
