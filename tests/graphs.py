"""Small models and data sets built in milliseconds, shared by the tests: import them from
here (`from graphs import conv_net`); conftest.py only turns some into fixtures."""

import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from calibration import CalibrationSource, collect_histograms
from quantize.pipeline import input_specs
from quantize.plan import QuantPlan
from quantize.runtime import session
from quantize.target import WEIGHT_FORMATS, default_weights, host_target

HOST_WEIGHTS = WEIGHT_FORMATS[
    default_weights(host_target())
]  # plans built by hand run on this machine's kernels


RNG = np.random.default_rng(0)


def skip_outside_ci(missing: bool, reason: str):
    """Skip on a developer's machine that lacks something; in CI (CI=true) run anyway and fail,
    so that CI cannot go green by skipping."""
    return pytest.mark.skipif(missing and os.environ.get("CI") != "true", reason=reason)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def conv_net(
    opset: int = 17, batchnorm: bool = True, channels: int = 8, size: int = 16
) -> onnx.ModelProto:
    """x(N,3,size,size) -> Conv -> [BatchNorm] -> Relu -> MaxPool -> Conv -> Add(skip) -> Relu
    -> GlobalAveragePool -> Flatten -> Gemm -> logits(N,10). The same weights on every call."""
    global RNG
    RNG = np.random.default_rng(0)
    c = channels
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1")]
    inits = [
        _init("w1", RNG.normal(0, 0.3, (c, 3, 3, 3)).astype(np.float32)),
        _init("b1", RNG.normal(0, 0.1, c).astype(np.float32)),
    ]
    first = "c1"
    if batchnorm:
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                ["c1", "g", "beta", "mu", "var"],
                ["bn1"],
                epsilon=1e-3,
                name="bn1",
            )
        )
        inits += [
            _init("g", RNG.uniform(0.5, 1.5, c).astype(np.float32)),
            _init("beta", RNG.normal(0, 0.1, c).astype(np.float32)),
            _init("mu", RNG.normal(0, 0.1, c).astype(np.float32)),
            _init("var", RNG.uniform(0.5, 2, c).astype(np.float32)),
        ]
        first = "bn1"
    nodes += [
        helper.make_node("Relu", [first], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"
        ),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "p1"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1, name="fc"),
    ]
    inits += [
        _init("w2", RNG.normal(0, 0.2, (c, c, 3, 3)).astype(np.float32)),
        _init("b2", RNG.normal(0, 0.1, c).astype(np.float32)),
        _init("wf", RNG.normal(0, 0.3, (10, c)).astype(np.float32)),
        _init("bf", RNG.normal(0, 0.1, 10).astype(np.float32)),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    onnx.checker.check_model(model)
    return model


def images(n: int, size: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (n, 3, size, size)).astype(np.float32)


def mixed_ops_net() -> onnx.ModelProto:
    """Conv x2 -> Concat -> Resize -> Conv -> LeakyRelu -> AveragePool -> Sigmoid -> Mul -> Conv (graph output)."""
    rng = np.random.default_rng(0)

    def weight(name, shape):
        return _init(name, rng.normal(0, 0.2, shape).astype(np.float32))

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
        helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1], name="conv_b"),
        helper.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="concat"),
        helper.make_node("Resize", ["cat", "", "scales"], ["up"], mode="nearest", name="resize"),
        helper.make_node("Conv", ["up", "w3"], ["c"], pads=[1, 1, 1, 1], name="conv_c"),
        helper.make_node("LeakyRelu", ["c"], ["lr"], alpha=0.2, name="leaky"),
        helper.make_node(
            "AveragePool", ["lr"], ["ap"], kernel_shape=[2, 2], strides=[2, 2], name="avgpool"
        ),
        helper.make_node("Sigmoid", ["ap"], ["sg"], name="sigmoid"),
        helper.make_node("Mul", ["sg", "ap"], ["m"], name="mul"),
        helper.make_node("Conv", ["m", "w4"], ["y"], name="conv_out"),
    ]
    inits = [
        weight("w1", (8, 3, 3, 3)),
        weight("w2", (8, 3, 3, 3)),
        _init("scales", np.array([1, 1, 2, 2], np.float32)),
        weight("w3", (8, 16, 3, 3)),
        weight("w4", (4, 8, 1, 1)),
    ]
    return image_model(nodes, inits, "mixed", y_channels=4)


def image_model(nodes, inits, name: str, y_channels: int, size: int = 16) -> onnx.ModelProto:
    """An opset-17 model of `nodes` from x(N,3,size,size) to y(N,y_channels,size,size)."""
    return images_to(nodes, inits, name, [y_channels, size, size], size)


def images_to(nodes, inits, name: str, y_dims: list[int], size: int = 16) -> onnx.ModelProto:
    """An opset-17 model of `nodes` from x(N,3,size,size) to y(N,*y_dims)."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *y_dims])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def token_net(vocab: int = 100, width: int = 32, length: int = 12) -> onnx.ModelProto:
    """ids(N,S) int64 -> Gather embedding -> Mul by mask -> MatMul + bias -> Relu -> MatMul -> Softmax."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed"),
        helper.make_node("Unsqueeze", ["mask", "axis"], ["m3"], name="unsqueeze"),
        helper.make_node("Mul", ["e", "m3"], ["em"], name="apply_mask"),
        helper.make_node("MatMul", ["em", "w1"], ["h"], name="ffn1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="ffn1_bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["o"], name="ffn2"),
        helper.make_node("Softmax", ["o"], ["y"], axis=-1, name="softmax"),
    ]
    inits = [
        _init("emb", rng.normal(0, 1, (vocab, width)).astype(np.float32)),
        _init("axis", np.array([2], np.int64)),
        _init("w1", rng.normal(0, 0.2, (width, 64)).astype(np.float32)),
        _init("b1", rng.normal(0, 0.1, 64).astype(np.float32)),
        _init("w2", rng.normal(0, 0.2, (64, width)).astype(np.float32)),
    ]
    inputs = [
        helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", length]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", length]),
    ]
    graph = helper.make_graph(
        nodes,
        "tokens",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", length, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def outlier_mlp() -> onnx.ModelProto:
    """x -> up (one output channel 100x the rest) -> down -> y: down's per-tensor uint8 input
    range is spent on that channel, up's input is ordinary."""
    rng = np.random.default_rng(0)
    up = rng.normal(0, 0.3, (16, 16)).astype(np.float32)
    up[:, 3] *= 100
    down = rng.normal(0, 0.3, (16, 16)).astype(np.float32)
    down[3] *= 0.001
    nodes = [
        helper.make_node("MatMul", ["x", "w_up"], ["h"], name="up"),
        helper.make_node("MatMul", ["h", "w_down"], ["y"], name="down"),
    ]
    return _mlp(nodes, "two", w_up=up, w_down=down)


def _mlp(nodes: list, name: str, **weights: np.ndarray) -> onnx.ModelProto:
    """x(N,16) -> `nodes` -> y(N,16), with the initializers `weights` (name -> array)."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def cube_mlp() -> onnx.ModelProto:
    """x -> up -> h -> Mul(h, h) -> Mul(., h) -> down -> y: the cube's heavy tail spends its
    uint8 range; up's and down's own inputs and weights are ordinary."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w_up"], ["h"], name="up"),
        helper.make_node("Mul", ["h", "h"], ["square"], name="square"),
        helper.make_node("Mul", ["square", "h"], ["cube"], name="cube"),
        helper.make_node("MatMul", ["cube", "w_down"], ["y"], name="down"),
    ]
    up, down = (rng.normal(0, 0.3, (16, 16)).astype(np.float32) for _ in range(2))
    return _mlp(nodes, "cube", w_up=up, w_down=down)


def chain_mlp(layers: int = 4) -> onnx.ModelProto:
    """x -> layer0 -> ... -> y: MatMuls of ordinary weights, each adding a like share of the
    output's noise, so that no one of them in FP32 removes much of it."""
    rng = np.random.default_rng(0)
    names = ["x", *(f"h{i}" for i in range(layers - 1)), "y"]
    nodes = [
        helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]], name=f"layer{i}")
        for i in range(layers)
    ]
    weights = {f"w{i}": rng.normal(0, 0.25, (16, 16)).astype(np.float32) for i in range(layers)}
    return _mlp(nodes, "chain", **weights)


def run(model, x):
    proto = model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)
    return session(proto).run(None, {"x": x})[0]


def ops(model: ir.Model) -> list[str]:
    return [n.op_type for n in model.graph]


def plan_for(model: ir.Model, nodes: set[str], size: int = 16) -> QuantPlan:
    """A plan with min/max ranges measured on random images of `size` x `size`."""
    names = [
        v.name
        for n in model.graph
        for v in [*n.inputs, *n.outputs]
        if v is not None and v.const_value is None
    ]
    x = images(64, size)
    source = CalibrationSource(
        Path("memory"),
        input_specs(ir.serde.serialize_model(model)),
        len(x),
        lambda a, b: {"x": x[a:b]},
    )
    histograms = collect_histograms(
        ir.serde.serialize_model(model), list(dict.fromkeys(names)), source, len(x)
    )
    return QuantPlan(
        nodes,
        {name: (min(h.min, 0.0), max(h.max, 0.0)) for name, h in histograms.items()},
        HOST_WEIGHTS,
    )


def run_pass(rewrite: ir.passes.PassBase, model: onnx.ModelProto) -> ir.Model:
    """`rewrite` alone on `model`, after shape inference (the passes read ranks and shapes) and
    followed by dead-node removal."""
    from onnx_ir.passes import common

    chain = ir.passes.PassManager(
        [common.ShapeInferencePass(), rewrite, common.RemoveUnusedNodesPass()]
    )
    return chain(ir.serde.deserialize_model(model)).model


def lcnet_block(extra_reader: bool = False) -> onnx.ModelProto:
    """x -> Conv (pad 1) -> * s1 + b1 -> hard-swish (c * clip(c + 3, 0, 6) / 6) -> * a + b2 ->
    depthwise Conv (pad 1) -> * s2 (per channel) + b3 -> 1x1 Conv -> y; with `extra_reader`,
    the depthwise Conv's output is also a second output."""
    rng = np.random.default_rng(0)

    def const(name, value):
        return numpy_helper.from_array(np.asarray(value, np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Mul", ["s1", "c1"], ["c1s"], name="scale1"),
        helper.make_node("Add", ["c1s", "b1"], ["c"], name="shift1"),
        helper.make_node("Add", ["c", "three"], ["c3"], name="add3"),
        helper.make_node("Clip", ["c3", "zero", "six"], ["clipped"], name="clip"),
        helper.make_node("Mul", ["c", "clipped"], ["m"], name="mul"),
        helper.make_node("Div", ["m", "six"], ["hs"], name="div6"),
        helper.make_node("Mul", ["hs", "a"], ["hsa"], name="scale_act"),
        helper.make_node("Add", ["hsa", "b2"], ["h"], name="shift_act"),
        helper.make_node(
            "Conv", ["h", "w2", "bias2"], ["d"], pads=[1, 1, 1, 1], group=8, name="depthwise"
        ),
        helper.make_node("Mul", ["d", "s2"], ["ds"], name="scale2"),
        helper.make_node("Add", ["ds", "b3"], ["e"], name="shift2"),
        helper.make_node("Conv", ["e", "w3"], ["y"], name="pointwise"),
    ]
    inits = [
        const("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        const("w2", rng.normal(0, 0.3, (8, 1, 3, 3))),
        const("bias2", rng.normal(0, 0.1, 8)),
        const("w3", rng.normal(0, 0.3, (4, 8, 1, 1))),
        const("s1", [1.7]),
        const("b1", [0.4]),
        const("three", 3),
        const("zero", 0),
        const("six", 6),
        const("a", [0.9]),
        const("b2", [-0.3]),
        const("s2", rng.uniform(0.5, 2, (8, 1, 1))),
        const("b3", rng.normal(0, 0.2, (1, 8, 1, 1))),
    ]
    model = image_model(nodes, inits, "lcnet_block", y_channels=4)
    if extra_reader:
        model.graph.output.append(helper.make_tensor_value_info("d", onnx.TensorProto.FLOAT, None))
    return model


def hard_swish_net(divisor=6.0) -> onnx.ModelProto:
    """x -> Conv -> hard-swish as Paddle2ONNX writes it (c * clip(c + 3, 0, 6) / divisor) ->
    Conv -> Div by 1 + its own Sigmoid -> y."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Add", ["c", "three"], ["c3"], name="add"),
        helper.make_node("Clip", ["c3", "zero", "six"], ["clipped"], name="clip"),
        helper.make_node("Mul", ["c", "clipped"], ["m"], name="mul"),
        helper.make_node("Div", ["m", "divisor"], ["hs"], name="div"),
        helper.make_node("Conv", ["hs", "w2"], ["d"], name="conv2"),
        helper.make_node("Sigmoid", ["d"], ["s"], name="sigmoid"),
        helper.make_node("Add", ["s", "one"], ["s1"], name="add_one"),
        helper.make_node("Div", ["d", "s1"], ["y"], name="div_by_activation"),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.float32(3), "three"),
        numpy_helper.from_array(np.float32(0), "zero"),
        numpy_helper.from_array(np.float32(1), "one"),
        numpy_helper.from_array(np.float32(6), "six"),
        numpy_helper.from_array(np.asarray(divisor, np.float32), "divisor"),
    ]
    return image_model(nodes, inits, "hard_swish", y_channels=4)


def crnn_net(hidden: int = 16) -> onnx.ModelProto:
    """A text recogniser's shape: x(N,3,16,16) -> Conv -> Relu -> columns as a sequence
    (16, N, 128) -> bidirectional LSTM (its layout attribute written out) -> MatMul and bias per
    step -> y(16, N, 10)."""
    rng = np.random.default_rng(0)
    gates = 4 * hidden
    nodes = [
        helper.make_node("Conv", ["x", "wc"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Transpose", ["r"], ["cols"], perm=[3, 0, 1, 2], name="columns"),
        helper.make_node("Reshape", ["cols", "seq_shape"], ["seq"], name="sequence"),
        helper.make_node(
            "LSTM",
            ["seq", "w", "r_w", "b"],
            ["h"],
            direction="bidirectional",
            hidden_size=hidden,
            layout=0,
            name="lstm",
        ),
        helper.make_node("Transpose", ["h"], ["steps"], perm=[0, 2, 1, 3], name="steps"),
        helper.make_node("Reshape", ["steps", "step_shape"], ["features"], name="features"),
        helper.make_node("MatMul", ["features", "wg"], ["g"], name="classes"),
        helper.make_node("Add", ["g", "bg"], ["y"], name="classes_bias"),
    ]
    inits = [
        _init("wc", rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)),
        _init("seq_shape", np.array([0, 0, -1], np.int64)),
        _init("w", rng.normal(0, 0.15, (2, gates, 128)).astype(np.float32)),
        _init("r_w", rng.normal(0, 0.3, (2, gates, hidden)).astype(np.float32)),
        _init("b", rng.normal(0, 0.1, (2, 2 * gates)).astype(np.float32)),
        _init("step_shape", np.array([0, 0, -1], np.int64)),
        _init("wg", rng.normal(0, 0.3, (2 * hidden, 10)).astype(np.float32)),
        _init("bg", rng.normal(0, 0.1, 10).astype(np.float32)),
    ]
    graph = helper.make_graph(
        nodes,
        "crnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, "N", 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
