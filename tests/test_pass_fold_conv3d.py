"""`FoldConv3DPass` (quantize/passes/fold_conv3d.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import ops, run, run_pass
from onnx import TensorProto, helper, numpy_helper
from onnx_ir.passes import common

from quantize import passes
from quantize.passes.fold_conv3d import FoldConv3DPass


def _conv3d_model(pads, bias: bool):
    rng = np.random.default_rng(0)
    inputs = ["x", "w"] + (["b"] if bias else [])
    inits = [numpy_helper.from_array(rng.normal(size=(5, 3, 3, 2, 4)).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(size=5).astype(np.float32), "b"))
    out_shape = [6 + pads[0] + pads[3] - 2, 7 + pads[1] + pads[4] - 1, 9 + pads[2] + pads[5] - 3]
    graph = helper.make_graph(
        [helper.make_node("Conv", inputs, ["y"], pads=pads, name="conv3d")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 7, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, *out_shape])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_conv3d_becomes_a_2d_conv_with_the_same_outputs():
    x = np.random.default_rng(1).normal(size=(2, 3, 6, 7, 9)).astype(np.float32)
    for pads, bias in (([0, 0, 0, 0, 0, 0], False), ([1, 0, 2, 2, 1, 0], True)):
        original = _conv3d_model(pads, bias)
        model = run_pass(passes.FoldConv3DPass(), original)
        convs = [n for n in model.graph if n.op_type == "Conv"]
        assert len(convs) == 1 and len(convs[0].inputs[1].const_value.shape) == 4
        assert model.graph.outputs[0].name == "y"
        np.testing.assert_allclose(run(model, x), run(original, x), rtol=1e-4, atol=1e-4)


def test_conv3d_computing_several_output_depths_per_window_keeps_the_outputs():
    x = np.random.default_rng(4).normal(size=(2, 3, 6, 7, 9)).astype(np.float32)
    for pads, bias, axis in (
        ([0, 0, 0, 0, 0, 0], False, 0),
        ([1, 0, 2, 1, 0, 2], True, 1),
        ([1, 1, 1, 1, 1, 1], True, 0),
    ):
        original = _conv3d_model(pads, bias)
        a_out = (6, 7, 9)[axis] + pads[axis] + pads[axis + 3] - (2, 1, 3)[axis]
        for group in [s for s in range(2, a_out + 1) if a_out % s == 0]:

            class Grouped(FoldConv3DPass):
                def outputs_per_window(self, k, ka, a_out, group=group):
                    return group

            model = ir.passes.PassManager([common.ShapeInferencePass(), Grouped()])(
                ir.serde.deserialize_model(original)
            ).model
            conv = next(n for n in model.graph if n.op_type == "Conv")
            assert conv.inputs[1].const_value.shape[0] == 5 * group
            np.testing.assert_allclose(run(model, x), run(original, x), rtol=1e-4, atol=1e-4)


def test_few_output_channels_are_computed_several_depths_per_window():
    fold = FoldConv3DPass()
    assert fold.outputs_per_window(k=64, ka=6, a_out=8) == 1  # 64 channels fill the kernel's blocks
    assert fold.outputs_per_window(k=6, ka=3, a_out=26) == 2  # 12 of 16 for 4/3 the work
    assert fold.outputs_per_window(k=1, ka=2, a_out=25) == 5


def test_conv3d_folds_an_unpadded_axis_and_needs_no_pad():
    x = np.random.default_rng(2).normal(size=(2, 3, 6, 7, 9)).astype(np.float32)
    for pads in ([1, 0, 2, 1, 0, 2], [1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1]):
        original = _conv3d_model(pads, bias=True)
        model = run_pass(passes.FoldConv3DPass(), original)
        assert ("Pad" in ops(model)) == (min(pads[a] + pads[a + 3] for a in range(3)) > 0), pads
        np.testing.assert_allclose(run(model, x), run(original, x), rtol=1e-4, atol=1e-4)
