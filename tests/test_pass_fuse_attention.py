"""Written-out attention becomes ORT's MultiHeadAttention in the clean-up for ONNX Runtime, then
ONNX Attention at opset 23 (OnnxAttentionPass), with the same outputs; a chain that does not
split the heads as attention does is left alone, and a model the version converter cannot raise
keeps MultiHeadAttention."""

from collections import Counter

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from benchmarks.zoo import minilm
from onnxio import cpu_session
from quantize import passes
from quantize.frontend import load_model
from quantize.passes import onnx_attention
from quantize.recipe import preset_for

SEQ, HEADS, HEAD_SIZE = 5, 2, 4
HIDDEN = HEADS * HEAD_SIZE


def attention_net(value_heads_split: bool = True) -> onnx.ModelProto:
    """One attention layer as exporters write it: Q, K, V projections split into heads by a
    Reshape and a Transpose, scores scaled by a Div, a (N, 1, 1, S) padding bias, a NaN guard.
    `value_heads_split=False`: V is reshaped straight to (N, H, S, D), which is not a head split."""
    rng = np.random.default_rng(0)
    value = (
        [
            helper.make_node("Reshape", ["v", "split"], ["v_split"]),
            helper.make_node("Transpose", ["v_split"], ["v4"], perm=[0, 2, 1, 3]),
        ]
        if value_heads_split
        else [helper.make_node("Reshape", ["v", "heads_first"], ["v4"])]
    )
    nodes = [
        *(helper.make_node("MatMul", ["x", f"w{p}"], [p]) for p in "qkv"),
        helper.make_node("Reshape", ["q", "split"], ["q_split"]),
        helper.make_node("Transpose", ["q_split"], ["q4"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["k", "split"], ["k_split"]),
        helper.make_node("Transpose", ["k_split"], ["k4"], perm=[0, 2, 3, 1]),
        *value,
        helper.make_node("MatMul", ["q4", "k4"], ["scores"]),
        helper.make_node("Div", ["scores", "root"], ["scaled"]),
        helper.make_node("Sub", ["one", "mask"], ["padding"]),
        helper.make_node("Mul", ["padding", "lowest"], ["bias"]),
        helper.make_node("Unsqueeze", ["bias", "axes12"], ["bias4"]),
        helper.make_node("Add", ["scaled", "bias4"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["p_guarded"]),
        helper.make_node("MatMul", ["p_guarded", "v4"], ["context"]),
        helper.make_node("Transpose", ["context"], ["context_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["context_t", "merge"], ["merged"]),
        helper.make_node("MatMul", ["merged", "wo"], ["y"]),
    ]
    arrays = {
        **{f"w{p}": rng.normal(0, 0.5, (HIDDEN, HIDDEN)).astype(np.float32) for p in "qkvo"},
        "split": np.array([0, 0, HEADS, HEAD_SIZE], np.int64),
        "heads_first": np.array([0, HEADS, SEQ, HEAD_SIZE], np.int64),
        "merge": np.array([0, 0, HIDDEN], np.int64),
        "root": np.float32(np.sqrt(HEAD_SIZE)),
        "one": np.float32(1),
        "lowest": np.float32(np.finfo(np.float32).min),
        "axes12": np.array([1, 2], np.int64),
        "zero": np.zeros(1, np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "attention",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", SEQ, HIDDEN]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", SEQ]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, name) for name, a in arrays.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def padded_feeds() -> dict[str, np.ndarray]:
    x = np.random.default_rng(1).normal(0, 1, (3, SEQ, HIDDEN)).astype(np.float32)
    mask = np.ones((3, SEQ), np.float32)
    mask[1, 3:] = mask[2, 1:] = 0
    return {"x": x, "mask": mask}


def op_counts(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def cleaned(model: onnx.ModelProto, runtime: str = "onnxruntime") -> onnx.ModelProto:
    return ir.serde.serialize_model(passes.cleanup(ir.serde.deserialize_model(model), runtime))


def test_written_out_attention_becomes_one_onnx_attention_with_the_same_outputs():
    model = attention_net()
    fused = cleaned(model)
    assert op_counts(fused)["Attention"] == 1 and op_counts(fused)["MultiHeadAttention"] == 0
    assert _default_opset(fused) == 23 and fused.ir_version >= 11
    assert not {"Softmax", "Transpose", "Reshape", "IsNaN"} & set(op_counts(fused))
    onnx.checker.check_model(fused, full_check=True)
    feeds = padded_feeds()
    [want], [got] = (cpu_session(m).run(None, feeds) for m in (model, fused))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert preset_for(ir.serde.deserialize_model(fused)) == "transformer"


def test_a_model_the_version_converter_cannot_raise_keeps_multi_head_attention(monkeypatch):
    def cannot(model, target_version):
        raise RuntimeError("No Adapter For Current Version")

    monkeypatch.setattr(onnx_attention.version_converter, "convert_version", cannot)
    model = attention_net()
    fused = cleaned(model)
    assert op_counts(fused)["MultiHeadAttention"] == 1 and op_counts(fused)["Attention"] == 0
    assert _default_opset(fused) == 17
    feeds = padded_feeds()
    [want], [got] = (cpu_session(m).run(None, feeds) for m in (model, fused))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _default_opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain == "")


def test_a_chain_that_does_not_split_the_heads_or_a_model_for_openvino_keeps_its_attention():
    for model, runtime in (
        (attention_net(value_heads_split=False), "onnxruntime"),
        (attention_net(), "openvino"),
    ):
        kept = cleaned(model, runtime)
        assert not {"MultiHeadAttention", "Attention"} & set(op_counts(kept))
        assert op_counts(kept)["Softmax"] == 1 and _default_opset(kept) == 17
        feeds = padded_feeds()
        [want], [got] = (cpu_session(m).run(None, feeds) for m in (model, kept))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", minilm.models(), ids=lambda m: m.name)
def test_each_torch_export_of_minilm_fuses_every_layer_and_computes_the_same_embeddings(model):
    path = model.build()
    fused = ir.serde.serialize_model(passes.cleanup(load_model(path)))
    assert op_counts(fused)["Attention"] == 6 and op_counts(fused)["Softmax"] == 0
    [feeds] = model.evaluation(16)[:1]
    assert (feeds["attention_mask"] == 0).any()  # padded sentences in the batch
    exported = ir.serde.serialize_model(load_model(path))
    for want, got in zip(*(cpu_session(m).run(None, feeds) for m in (exported, fused))):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
