"""Scalings and shifts by constants beside Convs fold away (FoldScalingPass,
FoldConvOutputAffinePass, FoldConvInputAffinePass), on a PP-LCNetV3 block as Paddle2ONNX writes
it; hard-swish's clip(x + 3, 0, 6) becomes the uint8 clamp of the Add before it."""

import numpy as np
import onnx
import onnx_ir as ir
from graphs import image_model, images, ops, run, run_pass
from onnx import helper, numpy_helper

from quantize import Recipe, quantize
from quantize.passes import (
    FoldConvInputAffinePass,
    FoldConvOutputAffinePass,
    FoldScalingPass,
    cleanup,
)


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


def test_a_scaling_of_a_scaling_is_one_mul():
    folded = run_pass(FoldScalingPass(), lcnet_block())
    (mul,) = [n for n in folded.graph if n.name == "scale_act"]
    assert "div6" not in [n.name for n in folded.graph]
    np.testing.assert_allclose(mul.inputs[1].const_value.numpy(), [0.9 / 6], rtol=1e-6)
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(lcnet_block(), x), rtol=1e-5, atol=1e-6)


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


def test_a_shift_before_a_padded_conv_stays_as_one_add_and_folds_into_an_unpadded_one():
    model = run_pass(FoldScalingPass(), lcnet_block())
    folded = run_pass(FoldConvInputAffinePass(), ir.serde.serialize_model(model))
    names = [n.name for n in folded.graph]
    assert "scale_act" not in names and "shift_act" not in names
    (shift,) = [n for n in folded.graph if n.name == "shift_act_shift"]
    assert shift.inputs[1].const_value.numpy().shape == (1,)  # a scalar: b2 / a for each channel
    np.testing.assert_allclose(shift.inputs[1].const_value.numpy(), [-0.3 / (0.9 / 6)], rtol=1e-6)
    assert "shift2" not in names and "scale2" not in names  # into the 1x1 pointwise Conv
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(lcnet_block(), x), rtol=1e-4, atol=1e-4)


def test_the_cleanup_leaves_one_add_and_one_mul_of_the_block_and_the_same_function():
    cleaned = cleanup(ir.serde.deserialize_model(lcnet_block()))
    assert sorted(ops(cleaned)) == ["Add", "Add", "Clip", "Conv", "Conv", "Conv", "Mul"]
    x = images(4)
    np.testing.assert_allclose(run(cleaned, x), run(lcnet_block(), x), rtol=1e-4, atol=1e-4)


def test_hard_swish_clip_is_the_uint8_clamp_of_the_add_before_it(tmp_path):
    onnx.save(lcnet_block(), str(tmp_path / "block.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "block.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    decisions = {d.name: (d.precision, d.reason) for d in result.decisions}
    assert decisions["clip"] == ("int8", "folded into the uint8 clamp")
    assert "Clip" not in ops(ir.serde.deserialize_model(result.model))
    assert result.kernels["boundary"].get("QuantizeLinear", 0) <= 1  # the input's only
    assert min(result.output_sqnr_db.values()) > 20
