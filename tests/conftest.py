"""Small models and data sets built in milliseconds, shared by the tests."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def conv_net(opset: int = 17, batchnorm: bool = True, channels: int = 8, size: int = 16) -> onnx.ModelProto:
    """x(N,3,size,size) -> Conv -> [BatchNorm] -> Relu -> MaxPool -> Conv -> Add(skip) -> Relu
    -> GlobalAveragePool -> Flatten -> Gemm -> logits(N,10). The same weights on every call."""
    global RNG
    RNG = np.random.default_rng(0)
    c = channels
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1")]
    inits = [_init("w1", RNG.normal(0, 0.3, (c, 3, 3, 3)).astype(np.float32)), _init("b1", RNG.normal(0, 0.1, c).astype(np.float32))]
    first = "c1"
    if batchnorm:
        nodes.append(helper.make_node("BatchNormalization", ["c1", "g", "beta", "mu", "var"], ["bn1"], epsilon=1e-3, name="bn1"))
        inits += [_init("g", RNG.uniform(0.5, 1.5, c).astype(np.float32)), _init("beta", RNG.normal(0, 0.1, c).astype(np.float32)),
                  _init("mu", RNG.normal(0, 0.1, c).astype(np.float32)), _init("var", RNG.uniform(0.5, 2, c).astype(np.float32))]
        first = "bn1"
    nodes += [
        helper.make_node("Relu", [first], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "p1"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1, name="fc"),
    ]
    inits += [_init("w2", RNG.normal(0, 0.2, (c, c, 3, 3)).astype(np.float32)), _init("b2", RNG.normal(0, 0.1, c).astype(np.float32)),
              _init("wf", RNG.normal(0, 0.3, (10, c)).astype(np.float32)), _init("bf", RNG.normal(0, 0.1, 10).astype(np.float32))]
    graph = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    onnx.checker.check_model(model)
    return model


def images(n: int, size: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (n, 3, size, size)).astype(np.float32)


@pytest.fixture
def conv_model(tmp_path):
    path = tmp_path / "net.onnx"
    onnx.save(conv_net(channels=32), str(path))
    return path


@pytest.fixture
def calib_npz(tmp_path):
    path = tmp_path / "calib.npz"
    np.savez(path, x=images(120))
    return path
