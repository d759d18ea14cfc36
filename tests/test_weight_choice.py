"""choose_weights: on a saturating target, the first format (paired, or int7 as here: the
coarser, so that uint8's gain is clear) unless it misses the accuracy goal and uint8 (all 8 bits,
exact U8U8 kernels) does better; the same calibration lowered twice."""

import numpy as np
import pytest
from graphs import conv_net, images

from quantize import Recipe, quantize
from quantize.fallback import Fallback, fall_back
from quantize.pipeline import keep_fp32, with_weights
from quantize.validate import output_sqnr
from quantize.weight_choice import choose_weights


@pytest.fixture(scope="module")
def int7(tmp_path_factory):
    import onnx

    folder = tmp_path_factory.mktemp("choice")
    onnx.save(conv_net(channels=32), str(folder / "net.onnx"))
    np.save(folder / "x.npy", images(120))
    return quantize(
        folder / "net.onnx",
        folder / "x.npy",
        Recipe(target="avx2", weights="int7", kernel_timing=False),
    )


def _weights(found: Fallback) -> str:
    return found.result.recipe.weights


def _stated(verdicts: dict[str, tuple], target: float = 20.0):
    """A goal whose verdict on each weight format is given: (score before, score after, the
    nodes its fallback sent to FP32); and the formats it brought to the goal, in order (one only
    scored, `max_nodes=0`, is not listed)."""
    asked = []

    def goal(result, max_nodes=4):
        before, after, nodes = verdicts[result.recipe.weights]
        if max_nodes == 0:
            return Fallback(result, target, before, before, [])
        asked.append(result.recipe.weights)
        return Fallback(result, target, before, after, nodes)

    return goal, asked


def test_uint8_is_the_same_calibration_with_all_8_bits_and_is_more_accurate(int7):
    uint8 = with_weights(int7, "uint8")
    assert uint8.recipe.weights == "uint8" and int7.recipe.weights == "int7"
    assert [d.precision for d in uint8.decisions] == [d.precision for d in int7.decisions]
    assert min(uint8.output_sqnr_db.values()) > min(int7.output_sqnr_db.values()) + 3


def test_uint8_measures_its_own_bias_corrections(int7):
    """A bias shift is the mean error of the weights it was measured with: int7's would
    mis-correct uint8, whose rounding differs."""
    assert int7.calibration.bias_shifts and int7.bias_correction.endswith(": kept")
    uint8 = with_weights(int7, "uint8")
    assert "Conv biases corrected" in uint8.bias_correction
    assert uint8.calibration.bias_shifts.keys() <= int7.calibration.bias_shifts.keys()
    assert not all(
        np.allclose(shift, int7.calibration.bias_shifts[conv])
        for conv, shift in uint8.calibration.bias_shifts.items()
    )


def test_the_choice_starts_from_int7(int7):
    goal, asked = _stated({"uint8": (25.0, 25.0, [])})
    with pytest.raises(
        ValueError, match="starts from paired or int7 weights .* this model has uint8"
    ):
        choose_weights(with_weights(int7, "uint8"), goal)
    assert asked == []


def test_int7_that_meets_the_goal_is_kept_without_trying_uint8(int7):
    goal, asked = _stated({"int7": (25.0, 25.0, []), "uint8": (40.0, 40.0, [])})
    found = choose_weights(int7, goal)
    assert asked == ["int7"] and _weights(found) == "int7" and found.result.model is int7.model
    assert found.result.weight_choice == "int7 met the accuracy goal (25)"
    # the speed check's or a fallback's re-lowering keeps the reason with the format
    assert (
        keep_fp32(found.result, {"conv2": "slower"}).weight_choice
        == "int7 met the accuracy goal (25)"
    )


def test_uint8_is_chosen_when_only_it_meets_the_goal_on_the_real_output_sqnr(int7):
    """The goal's floor sits between what int7 and uint8 reach on the held-out samples."""
    uint8_db = min(with_weights(int7, "uint8").output_sqnr_db.values())
    floor = (min(int7.output_sqnr_db.values()) + uint8_db) / 2

    def held_out_sqnr(result, max_nodes=0):
        score = lambda model: min(output_sqnr(int7.fp32_model, model, int7.held_out).values())  # noqa: E731
        return fall_back(result, score, floor, max_nodes)

    found = choose_weights(int7, held_out_sqnr)
    assert _weights(found) == "uint8" and found.met
    assert found.score_after == pytest.approx(uint8_db)
    assert found.result.weight_choice.startswith("only uint8 met the accuracy goal (int7 ")
    assert {p.key: p.value for p in found.result.model.metadata_props}[
        "quantize.weights"
    ] == "uint8"


def test_uint8_is_kept_only_where_it_buys_the_goal(int7):
    """Neither meets it: int7, the faster, however much closer uint8 came; only int7 meets it
    (after its fallback): int7."""
    goal, _ = _stated({"int7": (10.0, 12.0, ["conv2"]), "uint8": (15.0, 18.0, [])})
    found = choose_weights(int7, goal)
    assert _weights(found) == "int7" and found.result.weight_choice.startswith(
        "neither met the accuracy goal (int7 12 with 1 node(s) back in FP32, uint8 18)"
    )
    goal, _ = _stated({"int7": (10.0, 20.5, ["conv2"]), "uint8": (15.0, 18.0, [])})
    found = choose_weights(int7, goal)
    assert _weights(found) == "int7" and found.result.weight_choice.startswith("only int7 met")


def test_uint8_no_better_than_int7_with_every_node_int8_is_not_brought_to_the_goal(int7):
    """Where the 8th bit buys nothing, uint8's fallback would only repeat int7's trials, slower."""
    goal, asked = _stated({"int7": (12.0, 14.0, ["conv2"]), "uint8": (12.0, 30.0, [])})
    found = choose_weights(int7, goal)
    assert asked == ["int7"] and _weights(found) == "int7" and found.score_after == 14.0
    assert found.result.weight_choice == (
        "int7 missed the accuracy goal (14 with 1 node(s) back in FP32); uint8 scored 12 with "
        "every node INT8, no better than int7's 12: not tried further"
    )
    goal, asked = _stated({"int7": (12.0, 14.0, ["conv2"]), "uint8": (12.5, 30.0, [])})
    assert _weights(choose_weights(int7, goal)) == "uint8" and asked == ["int7", "uint8"]


def test_uint8_gets_no_fallback_where_int7_found_no_node_worth_its_step(int7):
    """Finer weights only shrink what a node in FP32 buys back: uint8 is scored whole."""
    goal, asked = _stated({"int7": (12.0, 12.0, []), "uint8": (15.0, 30.0, ["conv2"])})
    found = choose_weights(int7, goal)
    assert asked == ["int7"] and _weights(found) == "int7"
    assert found.result.weight_choice == (
        "neither met the accuracy goal (int7 12, uint8 15): int7, the faster"
    )


def test_when_both_meet_it_untimed_the_one_with_fewer_fp32_nodes_wins(int7):
    """int7 reaching the goal only with nodes back in FP32 against uint8 reaching it whole; the
    model is not timed (kernel timing off), so the count decides, int7 on a tie."""
    goal, asked = _stated({"int7": (19.0, 20.5, ["conv2"]), "uint8": (21.0, 21.0, [])})
    found = choose_weights(int7, goal)
    assert asked == ["int7"] and _weights(found) == "uint8"  # uint8 met it whole: no fallback
    assert "not timed here: fewer nodes in FP32" in found.result.weight_choice
    goal, _ = _stated({"int7": (19.0, 20.5, ["conv2"]), "uint8": (19.5, 20.5, ["conv1"])})
    assert _weights(choose_weights(int7, goal)) == "int7"
