import numpy as np
import onnx
import pytest
from graphs import conv_net, images, lcnet_block, mixed_ops_net, token_net
from onnx import TensorProto, helper

from calibration import METHODS
from onnxio import InputError
from quantize import NodeOverrides, Recipe, RunOptions, quantize
from quantize.coverage import INTEGER_OPS, MOVEMENT_OPS, optimized_graph
from quantize.pipeline import keep_fp32
from quantize.policy import NOT_BETWEEN_INT8, RULES, OpRule
from quantize.runtime import session


def test_every_compute_op_of_a_cnn_runs_as_an_integer_kernel(conv_model, calib_npz):
    result = quantize(
        conv_model, calib_npz, Recipe(kernel_timing=False), RunOptions(calib_samples=100)
    )
    assert result.kernels["int8"] == {
        "QGemm": 1,
        "QLinearAdd": 1,
        "QLinearConv": 2,
        "QLinearGlobalAveragePool": 1,
    }
    assert result.kernels["float"] == {}, result.kernels["float"]
    assert {d.op_type for d in result.decisions if d.precision == "fp32"} <= {"Flatten"}
    assert min(result.output_sqnr_db.values()) > 25
    assert result.sqnr_samples == "20 held-out samples"
    assert Recipe.from_model(result.model) == Recipe(kernel_timing=False).resolved()


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy", "mse"])
def test_every_method_gives_a_faithful_model(conv_model, calib_npz, method):
    result = quantize(
        conv_model, calib_npz, Recipe(ranges=METHODS[method]()), RunOptions(calib_samples=100)
    )
    assert min(result.output_sqnr_db.values()) > 20, method
    assert min(result.layer_sqnr_db.values()) > 15, result.layer_sqnr_db


def test_exclude_by_op_type_and_by_name(conv_model, calib_npz):
    result = quantize(
        conv_model,
        calib_npz,
        Recipe(kernel_timing=False, overrides=NodeOverrides(fp32=("Add", "conv1"))),
        RunOptions(calib_samples=100),
    )
    fp32 = {d.name: d.reason for d in result.decisions if d.precision == "fp32"}
    assert fp32["add1"] == fp32["conv1"] == "excluded by the user"
    assert (
        "QLinearAdd" not in result.kernels["int8"]
        and result.kernels["int8"].get("QLinearConv") == 1
    )


def test_ops_ort_cannot_run_in_int8_are_left_in_fp32_not_wrapped(tmp_path, calib_npz, monkeypatch):
    model = conv_net()
    gap = next(n for n in model.graph.node if n.op_type == "GlobalAveragePool")
    model.graph.node.insert(
        list(model.graph.node).index(gap),
        onnx.helper.make_node("Tanh", ["r2"], ["t2"], name="tanh"),
    )
    gap.input[0] = "t2"
    onnx.save(model, str(tmp_path / "tanh.onnx"))
    monkeypatch.setitem(RULES, "Tanh", OpRule())  # pretend the policy thought ORT had a kernel
    result = quantize(
        tmp_path / "tanh.onnx",
        calib_npz,
        Recipe(kernel_timing=False),
        RunOptions(calib_samples=100),
    )
    decision = next(d for d in result.decisions if d.name == "tanh")
    assert decision.precision == "fp32" and "no fusion for this pattern" in decision.reason
    # It now sits on the border of two INT8 regions; no Q/DQ pair exists for its sake.
    graph = optimized_graph(result.model)
    producer = {o: n for n in graph.node for o in n.output}
    tanh = next(n for n in graph.node if n.name == "tanh")
    consumer = {i: n for n in graph.node for i in n.input}

    def upstream(name):  # skip uint8 data movement (ORT's layout Transposes)
        node = producer[name]
        return upstream(node.input[0]) if node.op_type in MOVEMENT_OPS else node

    def downstream(name):
        node = consumer[name]
        return downstream(node.output[0]) if node.op_type in MOVEMENT_OPS else node

    dequantize = producer[tanh.input[0]]
    assert (
        dequantize.op_type == "DequantizeLinear"
        and upstream(dequantize.input[0]).op_type in INTEGER_OPS
    )
    quantize_after = downstream(tanh.output[0])
    assert (
        quantize_after.op_type == "QuantizeLinear"
        and downstream(quantize_after.output[0]).op_type in INTEGER_OPS
    )


def test_old_opsets_are_raised_to_13_and_stay_valid(tmp_path, calib_npz):
    onnx.save(conv_net(opset=11), str(tmp_path / "old.onnx"))
    result = quantize(
        tmp_path / "old.onnx", calib_npz, Recipe(kernel_timing=False), RunOptions(calib_samples=50)
    )
    onnx.checker.check_model(result.model)
    assert next(o.version for o in result.model.opset_import if o.domain == "") >= 13
    x = images(3)
    out = session(result.model).run(None, {"x": x})[0]
    assert out.shape == (3, 10) and np.isfinite(out).all()


def test_opset_10_model_is_upgraded(tmp_path, calib_npz):
    model = conv_net(opset=11)
    model.opset_import[0].version = 10
    onnx.save(model, str(tmp_path / "v10.onnx"))
    result = quantize(
        tmp_path / "v10.onnx", calib_npz, Recipe(kernel_timing=False), RunOptions(calib_samples=50)
    )
    assert next(o.version for o in result.model.opset_import if o.domain == "") >= 13


def test_a_fixed_batch_dimension_is_respected(tmp_path):
    model = conv_net(channels=8)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    onnx.save(model, str(tmp_path / "fixed.onnx"))
    np.save(tmp_path / "c.npy", images(30))
    result = quantize(
        tmp_path / "fixed.onnx",
        tmp_path / "c.npy",
        Recipe(kernel_timing=False),
        RunOptions(calib_samples=100),
    )
    assert result.calibration_samples == 24 and result.sqnr_samples == "4 held-out samples"
    assert min(result.output_sqnr_db.values()) > 20
    with pytest.raises(InputError, match="its batch is fixed at 4: it cannot be served at 8"):
        quantize(tmp_path / "fixed.onnx", tmp_path / "c.npy", options=RunOptions(serve_batch=8))


def test_every_op_of_the_policy_table_becomes_an_integer_kernel(tmp_path):
    onnx.save(mixed_ops_net(), str(tmp_path / "mixed.onnx"))
    np.save(tmp_path / "x.npy", images(80))
    result = quantize(tmp_path / "mixed.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    assert result.kernels["float"] == {}
    assert result.kernels["int8"] == {
        "QLinearAveragePool": 1,
        "QLinearConcat": 1,
        "QLinearConv": 4,
        "QLinearLeakyRelu": 1,
        "QLinearMul": 1,
        "QLinearSigmoid": 1,
    }
    assert all(d.precision == "int8" for d in result.decisions)
    assert [o.name for o in result.model.graph.output] == [
        "y"
    ]  # the quantized output keeps its name
    assert min(result.output_sqnr_db.values()) > 25


def test_token_model_with_integer_ids_mask_and_sequence_matmuls(tmp_path):
    onnx.save(token_net(), str(tmp_path / "tokens.onnx"))
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "c.npz",
        ids=rng.integers(0, 100, (100, 12)),
        mask=(rng.random((100, 12)) > 0.2).astype(np.float32),
    )
    result = quantize(tmp_path / "tokens.onnx", tmp_path / "c.npz", Recipe(kernel_timing=False))
    # the bias Add too; the last MatMul feeds the FP32 Softmax, so it keeps a float output
    assert result.kernels["int8"] == {
        "QLinearAdd": 1,
        "QLinearMatMul": 1,
        "MatMulIntegerToFloat": 1,
        "QLinearMul": 1,
    }
    assert "o_QuantizeLinear" not in {n.name for n in result.model.graph.node}
    assert result.kernels["float"] == {"Softmax": 1}
    decisions = {d.name: d for d in result.decisions}
    assert decisions["relu"].reason == "folded into the uint8 clamp"
    assert min(result.output_sqnr_db.values()) > 25


def attention_net(width: int = 16) -> onnx.ModelProto:
    """x (N,S,D): scores = (x Wq)(x Wk)^T -> Softmax -> context = scores x -> (context Wo) + x."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="query"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="key"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="key_t"),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", "x"], ["c"], name="context"),
        helper.make_node("MatMul", ["c", "wo"], ["o"], name="out"),
        helper.make_node("Add", ["o", "x"], ["y"], name="residual"),
    ]
    inits = [
        onnx.numpy_helper.from_array(rng.normal(0, 0.3, (width, width)).astype(np.float32), n)
        for n in ("wq", "wk", "wo")
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S", width])
    model = helper.make_model(
        helper.make_graph(nodes, "attention", [x], [y], inits),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    return model


def test_transformer_recipe_quantizes_weight_matmuls_only_and_takes_feeds_of_any_length(tmp_path):
    onnx.save(attention_net(), str(tmp_path / "attention.onnx"))
    rng = np.random.default_rng(0)
    feeds = [
        {"x": rng.normal(0, 1, (2, length, 16)).astype(np.float32)}
        for length in (3, 7, 12, 5, 9, 4)
    ]
    result = quantize(tmp_path / "attention.onnx", feeds, Recipe.transformer(kernel_timing=False))
    precision = {d.name: d.precision for d in result.decisions}
    assert {n: precision[n] for n in ("query", "key", "out")} == {
        "query": "int8",
        "key": "int8",
        "out": "int8",
    }
    assert {n: precision[n] for n in ("scores", "context", "residual", "key_t")} == dict.fromkeys(
        ("scores", "context", "residual", "key_t"), "fp32"
    )
    assert result.kernels["int8"] == {
        "MatMulIntegerToFloat": 3
    }  # integer GEMMs with float outputs: no requantization
    assert min(result.output_sqnr_db.values()) > 25
    assert result.calibration_samples + 1 == len(feeds)  # one feed held out for the SQNR


def test_transformer_recipe_keeps_a_convolutional_backbone_in_int8(tmp_path):
    """A hard-swish's affine shift before a padded depthwise Conv (PP-LCNetV3, the backbone of
    a text recogniser with attention after it) is read only by that Conv: it stays INT8, so the
    hard-swish is between INT8 ops and runs on uint8 too."""
    onnx.save(lcnet_block(), str(tmp_path / "lcnet.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(
        tmp_path / "lcnet.onnx", tmp_path / "x.npy", Recipe.transformer(kernel_timing=False)
    )
    precision = {(d.op_type, d.precision) for d in result.decisions}
    assert precision == {("Conv", "int8"), ("HardSwish", "int8"), ("Add", "int8")}
    assert min(result.output_sqnr_db.values()) > 20


def test_a_hard_swish_follows_the_conv_a_fallback_sends_back_into_fp32(tmp_path):
    """Alone after an FP32 Conv, a HardSwish would pay a QuantizeLinear, a QLinearAdd and a
    QLinearMul where ONNX Runtime fuses it into the FP32 Conv."""
    onnx.save(lcnet_block(), str(tmp_path / "lcnet.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "lcnet.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    assert {"QLinearAdd", "QLinearMul"} <= result.kernels["int8"].keys()
    fallen = keep_fp32(result, {"conv1": "a test's fallback"})
    precision = {d.op_type: (d.precision, d.reason) for d in fallen.decisions}
    assert precision["HardSwish"] == ("fp32", NOT_BETWEEN_INT8)
    assert not {"QLinearAdd", "QLinearMul"} & fallen.kernels["int8"].keys()
    assert fallen.kernels["int8"]["QLinearConv"] == 2


def test_an_empty_list_of_feeds_is_a_clean_error(tmp_path):
    onnx.save(attention_net(), str(tmp_path / "attention.onnx"))
    with pytest.raises(InputError, match="empty"):
        quantize(tmp_path / "attention.onnx", [], Recipe.transformer())


@pytest.mark.parametrize("option", ["wide_outputs", "residual_inputs"])
def test_refined_convs_must_be_convs_that_only_fp32_ops_read(conv_model, calib_npz, option):
    with pytest.raises(InputError, match=f"{option} names 'fc', which is not a Conv"):
        quantize(conv_model, calib_npz, Recipe(overrides=NodeOverrides(**{option: ("fc",)})))
    with pytest.raises(InputError, match="read by INT8"):
        quantize(conv_model, calib_npz, Recipe(overrides=NodeOverrides(**{option: ("conv2",)})))


def test_an_excluded_conv_between_int8_neighbours_really_runs_in_fp32(conv_model, calib_npz):
    """ORT's WeightBiasQuantization would round the weight of a float Conv fed by a per-tensor
    DequantizeLinear to int8 and fuse it into QLinearConv; the FP32 Conv reads a per-channel one."""
    result = quantize(
        conv_model,
        calib_npz,
        Recipe(kernel_timing=False, overrides=NodeOverrides(fp32=("conv2",))),
        RunOptions(calib_samples=100),
    )
    assert result.kernels["int8"]["QLinearConv"] == 1 and result.kernels["int8"]["QLinearAdd"] == 1
    graph = optimized_graph(result.model)
    producer = {o: n for n in graph.node for o in n.output}
    conv2 = next(
        n for n in graph.node if n.op_type == "Conv"
    )  # ORT names it after its output, in its NCHWc layout
    assert producer.get(conv2.input[1]) is None  # a float initializer, not a dequantized int8 one


def masked_attention_net(width: int = 8) -> onnx.ModelProto:
    """As torch.onnx.export writes a Hugging Face attention mask: scores + (1 - mask) * finfo.min."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Sub", ["one", "mask"], ["inverted"], name="invert_mask"),
        helper.make_node("Mul", ["inverted", "lowest"], ["mask_bias"], name="mask_bias"),
        helper.make_node(
            "Unsqueeze", ["mask_bias", "axis1"], ["mask_bias3"], name="unsqueeze_mask"
        ),
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="query"),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="x_t"),
        helper.make_node("MatMul", ["q", "xt"], ["scores"], name="scores"),
        helper.make_node("Add", ["scores", "mask_bias3"], ["masked"], name="apply_mask"),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", "x"], ["context"], name="context"),
        helper.make_node("MatMul", ["context", "wo"], ["y"], name="out"),
    ]
    inits = [
        onnx.numpy_helper.from_array(a, n)
        for n, a in (
            ("one", np.float32(1)),
            ("lowest", np.finfo(np.float32).min),
            ("axis1", np.array([1], np.int64)),
            ("wq", rng.normal(0, 0.3, (width, width)).astype(np.float32)),
            ("wo", rng.normal(0, 0.3, (width, width)).astype(np.float32)),
        )
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, width]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", 6]),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "masked",
            inputs,
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, width])],
            inits,
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    return model


def test_an_attention_mask_of_finfo_min_stays_fp32_and_the_rest_is_quantized(tmp_path):
    onnx.save(masked_attention_net(), str(tmp_path / "masked.onnx"))
    rng = np.random.default_rng(0)
    mask = np.ones((80, 6), np.float32)
    mask[40::2, 4:] = (
        0  # padding only after the first batches: the histogram must grow to cover finfo.min
    )
    np.savez(tmp_path / "c.npz", x=rng.normal(0, 1, (80, 6, 8)).astype(np.float32), mask=mask)
    result = quantize(tmp_path / "masked.onnx", tmp_path / "c.npz", Recipe(kernel_timing=False))
    decisions = {d.name: d for d in result.decisions}
    for name in ("mask_bias", "apply_mask"):
        assert (
            decisions[name].precision == "fp32"
            and "no uint8 scale can cover" in decisions[name].reason
        ), decisions[name]
    assert decisions["query"].precision == decisions["out"].precision == "int8"
    assert min(result.output_sqnr_db.values()) > 20


def test_a_relu_after_a_gemm_with_a_float_output_is_kept(tmp_path):
    """Gemm -> Relu -> Softmax: no INT8 op reads the Gemm, so ORT gives it a float output and
    no uint8 clamp exists to replace the Relu."""
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["y"], axis=-1, name="softmax"),
    ]
    inits = [
        onnx.numpy_helper.from_array(rng.normal(0, 0.5, (8, 8)).astype(np.float32), "w"),
        onnx.numpy_helper.from_array(rng.normal(0, 0.5, 8).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "g.onnx"))
    np.save(tmp_path / "x.npy", rng.normal(0, 1, (80, 8)).astype(np.float32))
    result = quantize(tmp_path / "g.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    decisions = {d.name: d for d in result.decisions}
    assert (
        decisions["fc"].precision == "int8"
        and "INT8 GEMM whose output stays float" in decisions["relu"].reason
    )
    assert "Relu" in {n.op_type for n in result.model.graph.node}
    assert min(result.output_sqnr_db.values()) > 30


def test_float_islands_are_dropped_for_as_many_rounds_as_it_takes(
    conv_model, calib_npz, monkeypatch
):
    """Each round ORT may reveal a new island; the model returned has none left."""
    from quantize import pipeline

    real, rounds = pipeline.coverage.float_islands, []
    order = ["fc", "add1", "conv2", "pool1", "gap"]

    def one_at_a_time(executed, planned):
        rounds.append(1)
        left = [name for name in order if name in planned]
        return {left[0]} if left else real(executed, planned)

    monkeypatch.setattr(pipeline.coverage, "float_islands", one_at_a_time)
    result = quantize(
        conv_model,
        calib_npz,
        Recipe(kernel_timing=False, bias_correction=False),  # one lowering, its rounds counted
        RunOptions(calib_samples=100),
    )
    precision = {d.name: d.precision for d in result.decisions}
    assert [precision[name] for name in order] == ["fp32"] * len(order) and len(rounds) == len(
        order
    ) + 1


def test_a_bias_too_large_for_int32_widens_the_weight_scale_instead_of_clipping(tmp_path):
    """A weak input (range 1e-6) under a bias of 1000: at s_in * s_w the bias needs ~1e14 levels;
    the output must still be the bias, not the int32 limit's 0.01."""
    rng = np.random.default_rng(5)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")
    graph = helper.make_graph(
        [conv],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 2, 2])],
        [
            onnx.numpy_helper.from_array(rng.normal(0, 0.1, (2, 3, 3, 3)).astype(np.float32), "w"),
            onnx.numpy_helper.from_array(np.array([1000.0, -500.0], np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "g.onnx"))
    np.save(tmp_path / "x.npy", rng.uniform(0, 1e-6, (40, 3, 4, 4)).astype(np.float32))
    result = quantize(tmp_path / "g.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    assert result.kernels["int8"] == {"QLinearConv": 1}
    assert min(result.output_sqnr_db.values()) > 40


def test_a_float16_model_is_a_clear_error_not_a_silent_copy(tmp_path):
    model = conv_net(channels=8)
    for tensor in model.graph.initializer:
        if tensor.data_type == TensorProto.FLOAT:
            tensor.CopyFrom(
                onnx.numpy_helper.from_array(
                    onnx.numpy_helper.to_array(tensor).astype(np.float16), tensor.name
                )
            )
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = TensorProto.FLOAT16
    onnx.save(model, str(tmp_path / "half.onnx"))
    np.savez(tmp_path / "c.npz", x=images(40).astype(np.float16))
    with pytest.raises(
        InputError,
        match="half.onnx: the model computes in float16: INT8 quantization starts from a float32 model",
    ):
        quantize(tmp_path / "half.onnx", tmp_path / "c.npz", Recipe(kernel_timing=False))


def c2f_block() -> onnx.ModelProto:
    """YOLOv8's C2f: Conv -> SiLU -> Split in two -> Conv on the second half -> Concat of the
    halves and that Conv -> Conv."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.normal(0, 0.3, (8, 3, 3, 3)),
        "w2": rng.normal(0, 0.3, (4, 4, 3, 3)),
        "w3": rng.normal(0, 0.3, (4, 12, 1, 1)),
        "sizes": np.array([4, 4]),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], name="conv_in"),
        helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
        helper.make_node("Mul", ["c", "s"], ["silu"], name="silu"),
        helper.make_node("Split", ["silu", "sizes"], ["a", "b"], axis=1, name="split"),
        helper.make_node("Conv", ["b", "w2"], ["d"], pads=[1, 1, 1, 1], name="conv_mid"),
        helper.make_node("Concat", ["a", "b", "d"], ["cat"], axis=1, name="concat"),
        helper.make_node("Conv", ["cat", "w3"], ["y"], name="conv_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "c2f",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 16, 16])],
        [
            onnx.numpy_helper.from_array(w.astype(np.int64 if k == "sizes" else np.float32), k)
            for k, w in weights.items()
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_split_between_int8_ops_runs_on_uint8_with_no_dequantize_before_it(tmp_path):
    onnx.save(c2f_block(), str(tmp_path / "c2f.onnx"))
    np.save(tmp_path / "x.npy", images(80))
    result = quantize(tmp_path / "c2f.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    assert {d.name: d.precision for d in result.decisions}["split"] == "int8"
    executed = optimized_graph(result.model)
    producer = {out: node.op_type for node in executed.node for out in node.output}
    (split,) = [n for n in executed.node if n.op_type == "Split"]
    assert producer[split.input[0]] not in ("DequantizeLinear", None)
    assert result.kernels["int8"]["QLinearConcat"] == 1
    assert min(result.output_sqnr_db.values()) > 25


def test_a_concat_part_nothing_else_reads_is_quantized_at_the_concats_range(tmp_path):
    """QLinearConcat copies a part at its own scale and zero point and requantizes any other one
    through a table, on one thread. The Conv's output d is read by the Concat alone: it takes the
    Concat's range. The Split's halves are the SiLU's output, which the middle Conv also reads:
    they keep its range."""
    onnx.save(c2f_block(), str(tmp_path / "c2f.onnx"))
    np.save(tmp_path / "x.npy", images(80))
    result = quantize(tmp_path / "c2f.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    constants = {i.name: onnx.numpy_helper.to_array(i) for i in result.model.graph.initializer}
    qparams = {
        n.input[0]: (float(constants[n.input[1]]), int(constants[n.input[2]]))
        for n in result.model.graph.node
        if n.op_type == "QuantizeLinear"
    }
    assert qparams["d"] == qparams["cat"]
    assert qparams["silu"] != qparams["cat"]
    assert min(result.output_sqnr_db.values()) > 25


def _box_distribution_head() -> onnx.ModelProto:
    """x (N,8,4,4) -> Conv to 16 bins x 4 sides -> Reshape -> Softmax over the bins -> Conv that
    takes each side's expected bin (YOLOv8's distribution focal loss head, in small)."""
    rng = np.random.default_rng(5)
    bins = np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["logits"], name="logits"),
        helper.make_node("Reshape", ["logits", "split_sides"], ["per_side"], name="per_side"),
        helper.make_node("Softmax", ["per_side"], ["p"], axis=1, name="softmax"),
        helper.make_node("Conv", ["p", "bins"], ["expected"], name="expected"),
    ]
    graph = helper.make_graph(
        nodes,
        "dfl",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 4, 4])],
        [helper.make_tensor_value_info("expected", TensorProto.FLOAT, ["N", 1, 4, 16])],
        [
            onnx.numpy_helper.from_array(rng.normal(0, 0.5, (64, 8, 1, 1)).astype(np.float32), "w"),
            onnx.numpy_helper.from_array(np.array([0, 16, 4, 16], np.int64), "split_sides"),
            onnx.numpy_helper.from_array(bins, "bins"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_softmax_between_int8_convs_runs_as_an_integer_kernel(tmp_path):
    onnx.save(_box_distribution_head(), str(tmp_path / "m.onnx"))
    rng = np.random.default_rng(6)
    feeds = [{"x": rng.normal(0, 1, (8, 8, 4, 4)).astype(np.float32)} for _ in range(6)]
    result = quantize(tmp_path / "m.onnx", feeds, Recipe(kernel_timing=False))
    assert result.kernels["int8"].get("QLinearSoftmax") == 1, result.kernels
    assert {d.name: d.precision for d in result.decisions}["softmax"] == "int8"
    assert min(result.output_sqnr_db.values()) > 25
