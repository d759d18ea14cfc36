"""`FoldUpsampleIntoConvPass` (quantize/passes/fold_upsample.py) on small hand-built graphs."""

import numpy as np
import onnx
from graphs import ops, run, run_pass
from onnx import TensorProto, helper, numpy_helper

from quantize import passes


def _upsampled_conv_model(factors, pads, conv_pads, nearest: bool = True) -> onnx.ModelProto:
    """x (N,3,4,5,3) -> nearest upsampling by `factors` as Keras exports it (Unsqueeze, Tile,
    Reshape per axis; with nearest=False, a plain Tile: x repeated as a whole) -> zero Pad ->
    Conv3D (4 channels, kernel 3x2x4, bias)."""
    rng = np.random.default_rng(0)
    shape, nodes, inits, value = [3, 4, 5, 3], [], [], "x"
    for axis, f in zip(range(2, 5), factors):
        repeats = [1] * 6
        repeats[axis + 1] = f
        shape[axis - 1] *= f
        names = [f"{n}{axis}" for n in ("axes", "repeats", "shape", "u", "t", "r")]
        inits += [
            numpy_helper.from_array(np.array([axis + 1], np.int64), names[0]),
            numpy_helper.from_array(np.array(repeats, np.int64), names[1]),
            numpy_helper.from_array(np.array([-1, *shape], np.int64), names[2]),
        ]
        if nearest:
            nodes += [
                helper.make_node("Unsqueeze", [value, names[0]], [names[3]]),
                helper.make_node("Tile", [names[3], names[1]], [names[4]]),
                helper.make_node("Reshape", [names[4], names[2]], [names[5]]),
            ]
        else:
            whole = [1] * 5
            whole[axis] = f
            nodes.append(helper.make_node("Tile", [value, f"whole_{names[1]}"], [names[5]]))
            inits.append(numpy_helper.from_array(np.array(whole, np.int64), f"whole_{names[1]}"))
        value = names[5]
    inits += [
        numpy_helper.from_array(np.array([0, 0, *pads[:3], 0, 0, *pads[3:]], np.int64), "pads"),
        numpy_helper.from_array(rng.normal(size=(4, 3, 3, 2, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=4).astype(np.float32), "b"),
    ]
    nodes += [
        helper.make_node("Pad", [value, "pads"], ["padded"]),
        helper.make_node("Conv", ["padded", "w", "b"], ["y"], pads=conv_pads, name="conv"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_upsampling_folds_into_the_conv_that_reads_it_with_the_same_outputs():
    x = np.random.default_rng(2).normal(size=(2, 3, 4, 5, 3)).astype(np.float32)
    for factors, pads, conv_pads in (
        ((2, 2, 3), [1, 0, 3, 1, 0, 3], [0] * 6),
        ((2, 1, 2), [0, 2, 1, 2, 0, 0], [1, 0, 2, 0, 1, 1]),
    ):
        original = _upsampled_conv_model(factors, pads, conv_pads)
        cleaned = run_pass(passes.FoldUpsampleIntoConvPass(), original)
        assert "Tile" not in ops(cleaned)
        conv = next(n for n in cleaned.graph if n.op_type == "Conv")
        assert conv.name == "conv" and conv.inputs[1].const_value.shape[0] == 4 * int(
            np.prod(factors)
        )  # a (phase, channel) output each
        np.testing.assert_allclose(run(cleaned, x), run(original, x), rtol=1e-4, atol=1e-4)


def test_a_tile_that_is_not_a_nearest_upsampling_is_not_folded():
    x = np.random.default_rng(3).normal(size=(2, 3, 4, 5, 3)).astype(np.float32)
    original = _upsampled_conv_model((2, 1, 2), [0] * 6, [0] * 6, nearest=False)
    cleaned = run_pass(passes.FoldUpsampleIntoConvPass(), original)
    assert "Tile" in ops(cleaned)
    np.testing.assert_allclose(run(cleaned, x), run(original, x), rtol=1e-4, atol=1e-4)
