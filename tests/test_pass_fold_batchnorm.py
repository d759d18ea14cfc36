"""`FoldBatchNormPass` (quantize/passes/fold_batchnorm.py) on small hand-built graphs."""

import numpy as np
import onnx
import onnx_ir as ir
from graphs import conv_net, images, ops, run
from onnx import TensorProto, helper, numpy_helper

from quantize import passes


def test_batchnorm_folds_into_conv_with_the_same_outputs():
    original = conv_net()
    model = ir.serde.deserialize_model(original)
    result = passes.FoldBatchNormPass()(model)
    assert result.modified and "BatchNormalization" not in ops(result.model)
    x = images(4)
    np.testing.assert_allclose(run(result.model, x), run(original, x), rtol=1e-4, atol=1e-5)


def _upsampling_head(group: int) -> onnx.ModelProto:
    """x(N,3,16,16) -> ConvTranspose (stride 2, `group` groups) -> BatchNorm -> y: a text
    detector's segmentation head."""
    rng = np.random.default_rng(0)
    channels = 3 * group

    def const(name, array):
        return numpy_helper.from_array(np.asarray(array, np.float32), name)

    nodes = [
        helper.make_node(
            "ConvTranspose", ["x", "w", "b"], ["up"], strides=[2, 2], group=group, name="up"
        ),
        helper.make_node(
            "BatchNormalization", ["up", "gamma", "beta", "mean", "var"], ["y"], name="bn"
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, 32, 32])],
        [
            const("w", rng.normal(0, 0.5, (3, 3, 2, 2))),
            const("b", rng.normal(0, 0.5, channels)),
            const("gamma", rng.uniform(0.5, 2, channels)),
            const("beta", rng.normal(0, 1, channels)),
            const("mean", rng.normal(0, 1, channels)),
            const("var", rng.uniform(0.1, 2, channels)),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_batchnorm_folds_into_an_upsampling_conv_transpose_per_output_channel():
    original = _upsampling_head(group=1)
    result = passes.FoldBatchNormPass()(ir.serde.deserialize_model(original))
    assert ops(result.model) == ["ConvTranspose"]
    x = images(4)
    np.testing.assert_allclose(run(result.model, x), run(original, x), rtol=1e-4, atol=1e-5)


def test_a_grouped_conv_transpose_keeps_its_batchnorm():
    result = passes.FoldBatchNormPass()(ir.serde.deserialize_model(_upsampling_head(group=3)))
    assert ops(result.model) == ["ConvTranspose", "BatchNormalization"]
