"""The FP32 clean-up as a whole: what the pass chain guarantees together."""

import numpy as np
import onnx_ir as ir
from graphs import conv_net, images, lcnet_block, ops, run
from onnx import helper

from quantize import passes


def test_cleanup_removes_dead_nodes_and_names_every_node():
    original = conv_net()
    original.graph.node.append(helper.make_node("Relu", ["c1"], ["unused"]))
    cleaned = passes.cleanup(ir.serde.deserialize_model(original))
    assert (
        "BatchNormalization" not in ops(cleaned)
        and len(cleaned.graph) == len(original.graph.node) - 2
    )
    assert all(n.name for n in cleaned.graph)
    x = images(2)
    np.testing.assert_allclose(run(cleaned, x), run(original, x), rtol=1e-4, atol=1e-5)


def test_the_cleanup_leaves_a_hard_swish_and_one_add_of_the_block_and_the_same_function():
    cleaned = passes.cleanup(ir.serde.deserialize_model(lcnet_block()))
    assert sorted(ops(cleaned)) == ["Add", "Conv", "Conv", "Conv", "HardSwish"]
    x = images(4)
    np.testing.assert_allclose(run(cleaned, x), run(lcnet_block(), x), rtol=1e-4, atol=1e-4)
