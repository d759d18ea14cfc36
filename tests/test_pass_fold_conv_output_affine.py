"""`FoldConvOutputAffinePass` (quantize/passes/fold_conv_output_affine.py): per-channel scales
and shifts after a Conv or ConvTranspose (a BatchNorm, a PP-LCNetV3 block's learnable scale and
bias, a Paddle2ONNX ConvTranspose's bias Add) go into its weights and bias."""

import numpy as np
import onnx
from graphs import conv_net, images, lcnet_block, ops, run, run_pass
from onnx import TensorProto, helper, numpy_helper

from quantize.passes import FoldConvOutputAffinePass


def test_a_scale_and_shift_after_a_conv_fold_into_its_weights_and_bias():
    folded = run_pass(FoldConvOutputAffinePass(), lcnet_block())
    names = [n.name for n in folded.graph]
    assert not {"scale1", "shift1", "scale2", "shift2"} & set(names)
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(lcnet_block(), x), rtol=1e-4, atol=1e-5)


def test_a_conv_whose_output_has_another_reader_keeps_its_scale():
    folded = run_pass(FoldConvOutputAffinePass(), lcnet_block(extra_reader=True))
    names = [n.name for n in folded.graph]
    assert "scale2" in names and "shift1" not in names


def test_batchnorm_folds_into_conv_with_the_same_outputs():
    folded = run_pass(FoldConvOutputAffinePass(), conv_net())
    assert "BatchNormalization" not in ops(folded)
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(conv_net(), x), rtol=1e-4, atol=1e-5)


def _upsampling_head(group: int) -> onnx.ModelProto:
    """x(N,3,16,16) -> ConvTranspose (stride 2, `group` groups) -> + bias -> BatchNorm -> Relu
    -> y: a text detector's segmentation head as Paddle2ONNX writes it."""
    rng = np.random.default_rng(0)
    channels = 3 * group

    def const(name, array):
        return numpy_helper.from_array(np.asarray(array, np.float32), name)

    nodes = [
        helper.make_node("ConvTranspose", ["x", "w"], ["up"], strides=[2, 2], group=group),
        helper.make_node("Add", ["up", "b"], ["biased"], name="bias"),
        helper.make_node("BatchNormalization", ["biased", "gamma", "beta", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, 32, 32])],
        [
            const("w", rng.normal(0, 0.5, (3, 3, 2, 2))),
            const("b", rng.normal(0, 0.5, (1, channels, 1, 1))),
            const("gamma", rng.uniform(0.5, 2, channels)),
            const("beta", rng.normal(0, 1, channels)),
            const("mean", rng.normal(0, 1, channels)),
            const("var", rng.uniform(0.1, 2, channels)),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bias_and_batchnorm_fold_into_an_upsampling_conv_transpose_per_output_channel():
    folded = run_pass(FoldConvOutputAffinePass(), _upsampling_head(group=1))
    assert ops(folded) == ["ConvTranspose", "Relu"]
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(_upsampling_head(1), x), rtol=1e-4, atol=1e-5)


def test_a_grouped_conv_transpose_takes_its_bias_but_keeps_its_batchnorm():
    folded = run_pass(FoldConvOutputAffinePass(), _upsampling_head(group=3))
    assert ops(folded) == ["ConvTranspose", "BatchNormalization", "Relu"]
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(_upsampling_head(3), x), rtol=1e-4, atol=1e-5)
