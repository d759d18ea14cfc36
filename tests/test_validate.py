"""`quantize.validate`: output SQNR and cosine count what a model's users read, an output that
joins parts of different scales part by part."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from quantize.validate import cosine_against, model_outputs, reference_outputs, sqnr_against


def _model(noise_on_padding: float):
    """y = x + noise_on_padding * (1 - attention_mask) per token, and z = the sum of y over
    tokens (an output without the token dimension)."""
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "m"], ["padding"]),
        helper.make_node("Unsqueeze", ["padding", "last"], ["p3"]),
        helper.make_node("Mul", ["p3", "noise"], ["n"]),
        helper.make_node("Add", ["x", "n"], ["y"]),
        helper.make_node("ReduceSum", ["y", "tokens"], ["z"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "masked",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", 4]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["B", "T"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "T", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["B", 4]),
        ],
        [
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
            helper.make_tensor("noise", TensorProto.FLOAT, [], [noise_on_padding]),
            helper.make_tensor("last", TensorProto.INT64, [1], [-1]),
            helper.make_tensor("tokens", TensorProto.INT64, [1], [1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_output_sqnr_leaves_out_padded_tokens_of_outputs_that_have_a_token_dimension():
    rng = np.random.default_rng(0)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], np.int64)
    batches = [{"x": rng.normal(0, 1, (2, 5, 4)).astype(np.float32), "attention_mask": mask}]
    reference = reference_outputs(_model(0.0), batches)
    sqnr = sqnr_against(reference, _model(100.0), batches)
    assert sqnr["y"] == float("inf")  # the error sits on padding only
    assert sqnr["z"] < 0  # summed over all tokens, padding included: every value is off


def test_output_cosine_is_a_mean_over_samples_of_their_real_tokens():
    rng = np.random.default_rng(0)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], np.int64)
    batches = [{"x": rng.normal(0, 1, (2, 5, 4)).astype(np.float32), "attention_mask": mask}]
    reference = reference_outputs(_model(0.0), batches)
    assert cosine_against(reference, _model(0.0), batches) == pytest.approx({"y": 1.0, "z": 1.0})
    cosine = cosine_against(reference, _model(100.0), batches)
    assert cosine["y"] == pytest.approx(1.0)  # the error sits on padding only
    z_ref, z_off = reference.outputs["z"][0], model_outputs(_model(100.0), batches)["z"][0]
    per_sample = [r @ o / np.linalg.norm(r) / np.linalg.norm(o) for r, o in zip(z_ref, z_off)]
    assert cosine["z"] == pytest.approx(np.mean(per_sample)) and cosine["z"] < 0.9


def _detector(score_error: float, typed_boxes: bool = True):
    """out = Concat(boxes * 100, scores + score_error) on axis 1: a detector's pixel boxes (4
    rows) beside its class scores (18 rows); `typed_boxes`: the graph records the boxes' shape."""
    nodes = [
        helper.make_node("Mul", ["boxes", "hundred"], ["pixels"]),
        helper.make_node("Add", ["scores", "error"], ["scored"]),
        helper.make_node("Concat", ["pixels", "scored"], ["out"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "detector",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["B", 4, 30]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", 18, 30]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", 22, 30])],
        [
            helper.make_tensor("hundred", TensorProto.FLOAT, [], [100.0]),
            helper.make_tensor("error", TensorProto.FLOAT, [], [score_error]),
        ],
        value_info=[
            helper.make_tensor_value_info("scored", TensorProto.FLOAT, ["B", 18, 30]),
            *(
                [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["B", 4, 30])]
                * typed_boxes
            ),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _detector_batches():
    rng = np.random.default_rng(0)
    return [
        {
            "boxes": rng.normal(0, 1, (2, 4, 30)).astype(np.float32),
            "scores": rng.uniform(0, 1, (2, 18, 30)).astype(np.float32),
        }
    ]


def test_an_output_a_concat_writes_is_judged_by_each_part_so_big_boxes_do_not_hide_noisy_scores():
    batches = _detector_batches()
    reference = reference_outputs(_detector(0.0), batches)
    sqnr = sqnr_against(reference, _detector(0.3), batches)
    assert set(sqnr) == {"out[pixels]", "out[scored]"}
    assert sqnr["out[pixels]"] == float("inf")
    scores = batches[0]["scores"]
    assert sqnr["out[scored]"] == pytest.approx(10 * np.log10(np.mean(scores**2) / 0.09), abs=1e-3)
    whole = sqnr_against(reference_outputs(_detector(0.0, False), batches), _detector(0.3), batches)
    assert set(whole) == {"out"}  # the boxes' size along the axis unknown: one whole output
    assert whole["out"] > 30 > 10 > sqnr["out[scored]"]  # the whole hid what the scores lost


def test_output_cosine_is_judged_by_parts_too():
    batches = _detector_batches()
    reference = reference_outputs(_detector(0.0), batches)
    cosine = cosine_against(reference, _detector(-0.5), batches)
    assert cosine["out[pixels]"] == pytest.approx(1.0)
    assert cosine["out[scored]"] < 0.9


def test_a_concat_of_one_tensor_with_itself_is_measured_whole():
    model = _detector(0.0)
    model.graph.node[2].input[:] = ["scored", "scored"]
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 36
    assert [p.label for p in reference_outputs(model, _detector_batches()).parts] == ["out"]
