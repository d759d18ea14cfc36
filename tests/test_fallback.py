import argparse
import json
import math

import numpy as np
import onnx
import pytest
from graphs import chain_mlp, cube_mlp, outlier_mlp

from quantize import Recipe, cli, fallback, pipeline, quantize, validate
from quantize.fallback import GROUP_COST, fall_back, to_fidelity_floor
from quantize.pipeline import CHECK_SECONDS, CLOSE_CALL, qdq_model
from quantize.report import summarize
from quantize.runtime import CompileError, session
from quantize.validate import sqnr_db


def _setup(tmp_path, model=outlier_mlp):
    onnx.save(model(), str(tmp_path / "m.onnx"))
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (32, 16)).astype(np.float32)} for _ in range(8)]
    result = quantize(tmp_path / "m.onnx", feeds, Recipe(kernel_timing=False))
    x = {"x": rng.normal(0, 1, (256, 16)).astype(np.float32)}
    reference = session(tmp_path / "m.onnx").run(None, x)[0]
    return result, lambda model: sqnr_db(reference, session(model).run(None, x)[0])


def test_the_node_whose_fp32_trial_gains_most_goes_back_until_the_target_is_met(tmp_path):
    result, score = _setup(tmp_path)
    before = score(result.model)
    found = fall_back(result, score, target=before + 10)
    assert found.trial_gains["down"] > found.trial_gains["up"] + 10
    assert found.fp32_nodes == ["down"] and found.met and found.score_after >= before + 10
    decisions = {d.name: d for d in found.result.decisions}
    assert decisions["down"].precision == "fp32" and decisions["down"].reason.startswith(
        "accuracy fallback"
    )
    assert decisions["up"].precision == "int8"
    assert _reads_dequantized(result.model, "down") and not _reads_dequantized(
        found.result.model, "down"
    )


def test_where_the_loss_is_the_rounding_of_its_input_a_node_goes_back_with_what_makes_it(
    tmp_path,
):
    result, score = _setup(tmp_path, cube_mlp)
    before = score(result.model)
    found = fall_back(result, score, target=before + 5, min_gain=2)
    # neither MatMul alone gains much (measured: 0.5 dB at most, 1.1 under as-cpu avx2): the
    # cube is still rounded
    assert max(found.trial_gains.values()) < 2
    assert found.unit_gains.keys() == {"down"} and found.unit_gains["down"] > 5
    assert found.fp32_nodes == ["down", "cube", "square"] and found.met
    decisions = {d.name: d for d in found.result.decisions}
    assert decisions["up"].precision == "int8"
    assert "with cube, square (which make its input)" in decisions["square"].reason

    unit = found.unit_gains["down"]
    found = fall_back(result, score, target=before + unit + 1, min_gain=2)
    assert found.fp32_nodes == ["down", "cube", "square", "up"]  # up then writes only to FP32
    assert {d.name: d for d in found.result.decisions}["up"].reason.endswith(
        "every node reading its output is in FP32"
    )


def _reads_dequantized(model: onnx.ModelProto, name: str) -> bool:
    dequantized = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return any(i in dequantized for n in model.graph.node if n.name == name for i in n.input)


def test_a_model_that_meets_the_target_is_left_as_it_is(tmp_path):
    result, score = _setup(tmp_path)
    found = fall_back(result, score, target=score(result.model) - 1)
    assert found.result is result and found.fp32_nodes == [] and found.met


def test_a_trial_score_ranks_the_one_node_trials_and_the_score_decides_each_step(tmp_path):
    result, score = _setup(tmp_path)
    trials = []

    def trial_score(model):
        trials.append(model)
        return score(model)

    found = fall_back(result, score, target=score(result.model) + 10, trial_score=trial_score)
    assert len(trials) == 3  # the INT8 model, then "up" and "down" each alone in FP32
    assert found.fp32_nodes == ["down"] and found.met


def test_an_unreachable_target_stops_after_max_nodes_and_says_it_was_not_met(tmp_path):
    result, score = _setup(tmp_path)
    found = fall_back(result, score, target=float("inf"), max_nodes=1)
    assert len(found.fp32_nodes) == 1 and not found.met


def test_with_max_nodes_0_the_result_is_only_scored_without_trials(tmp_path):
    result, score = _setup(tmp_path)
    scored = []
    found = fall_back(result, lambda m: scored.append(m) or score(m), float("inf"), max_nodes=0)
    assert scored == [result.model] and found.result is result and found.trial_gains == {}
    assert found.score_after == found.score_before == score(result.model) and not found.met


class _CappedSqnr:
    """A stand-in task metric: output SQNR against FP32, capped at 30 dB (FP32 scores 30)."""

    name, metric, higher_is_better = "sqnr", "output SQNR dB", True

    def __init__(self, reference_model):
        self.x = {"x": np.random.default_rng(2).normal(0, 1, (256, 16)).astype(np.float32)}
        self.reference = session(reference_model).run(None, self.x)[0]

    def evaluate(self, model) -> float:
        return min(30.0, sqnr_db(self.reference, session(model).run(None, self.x)[0]))


def test_the_command_line_bounds_the_metric_drop_and_says_which_nodes_went_back(
    tmp_path, monkeypatch, capsys
):
    onnx.save(outlier_mlp(), str(tmp_path / "m.onnx"))
    np.save(
        tmp_path / "calib.npy", np.random.default_rng(1).normal(0, 1, (256, 16)).astype(np.float32)
    )
    monkeypatch.setattr(
        "quantize.evaluators.get_evaluator", lambda name: _CappedSqnr(tmp_path / "m.onnx")
    )
    code = cli.main(
        [
            str(tmp_path / "m.onnx"),
            "--calib",
            str(tmp_path / "calib.npy"),
            "-o",
            str(tmp_path / "q.onnx"),
            "--evaluate",
            "sqnr",
            "--max-drop",
            "1",
            "--json",
            "--no-kernel-timing",  # about the fallback: no timing may send the model to FP32
        ]
    )
    assert code == 0
    fp32_nodes = {
        n["name"]: n["reason"]
        for n in json.loads(capsys.readouterr().out)["coverage"]["fp32_nodes"]
    }
    assert fp32_nodes["down"].startswith("accuracy fallback") and "up" not in fp32_nodes
    assert _CappedSqnr(tmp_path / "m.onnx").evaluate(onnx.load(tmp_path / "q.onnx")) >= 29


def test_without_an_evaluator_the_drop_is_bounded_on_the_output_cosine_to_fp32(tmp_path, capsys):
    onnx.save(outlier_mlp(), str(tmp_path / "m.onnx"))
    np.save(
        tmp_path / "calib.npy", np.random.default_rng(1).normal(0, 1, (256, 16)).astype(np.float32)
    )
    args = [str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "calib.npy"), "--json"]
    args += ["--no-kernel-timing"]
    report = ["--report", str(tmp_path / "r.html")]
    assert cli.main([*args, *report, "-o", str(tmp_path / "q.onnx"), "--max-drop", "0.01"]) == 0
    report = json.loads(capsys.readouterr().out)
    fp32_nodes = {n["name"]: n["reason"] for n in report["coverage"]["fp32_nodes"]}
    assert fp32_nodes["down"].startswith("accuracy fallback") and "up" not in fp32_nodes
    metric = report["metric"]
    assert metric["name"] == "output cosine to FP32" and metric["fp32"] == pytest.approx(1.0)
    assert metric["int8"] >= 0.99 and metric["drop"] <= 0.01
    assert cli.main([*args, "-o", str(tmp_path / "all.onnx"), "--max-drop", "0.5"]) == 0
    assert json.loads(capsys.readouterr().out)["coverage"]["fp32_nodes"] == []


def test_a_step_that_does_not_raise_the_score_enough_is_undone_and_ends_the_search(tmp_path):
    result, score = _setup(tmp_path)
    before = score(result.model)
    gain = fall_back(result, score, target=before + 10).score_after - before
    found = fall_back(result, score, target=before + 10, min_gain=gain + 1)
    assert found.fp32_nodes == [] and found.result is result and found.score_after == before
    assert not found.met


def _counting(score, trials):
    return lambda model: trials.append(model) or score(model)


def test_screening_in_groups_tries_alone_only_the_members_of_a_group_that_gains(tmp_path):
    result, score = _setup(tmp_path)
    target = score(result.model) + 10
    trials = []
    found = fall_back(result, score, target, trial_score=_counting(score, trials), group_size=2)
    # the INT8 model, "up" and "down" together, then each alone; the pair gains more than either,
    # so it goes back as a group (the FP32 model, exact), shrunk on a trial of each member in INT8
    assert len(trials) == 4 + 2
    assert found.fp32_nodes == ["down"] and found.met
    assert set(found.trial_gains) == {"up", "down"}

    together = score(qdq_model(result, {"up", "down"})) - score(result.model)
    trials = []
    found = fall_back(
        result,
        score,
        target,
        trial_score=_counting(score, trials),
        min_gain=together + 1,
        group_size=2,
    )
    assert len(trials) == 2  # the INT8 model, then the group, which gains too little
    assert found.fp32_nodes == [] and found.trial_gains == {} and found.result is result


def test_a_group_whose_members_gain_little_alone_goes_back_shrunk_to_what_the_target_needs(
    tmp_path,
):
    result, score = _setup(tmp_path, chain_mlp)
    target = score(result.model) + 3
    alone = fall_back(result, score, target, min_gain=2.5)
    assert max(alone.trial_gains.values()) < 2.5 and alone.fp32_nodes == [] and not alone.met

    found = fall_back(result, score, target, min_gain=2.5, group_size=4)
    assert found.met and 0 < len(found.fp32_nodes) < 4  # the group, then shrunk
    decisions = {d.name: d for d in found.result.decisions}
    assert all("screened together" in decisions[n].reason for n in found.fp32_nodes)
    assert {n for n, d in decisions.items() if d.precision == "int8"} == {
        f"layer{i}" for i in range(4)
    } - set(found.fp32_nodes)


def test_a_group_is_shrunk_on_trials_and_lowered_once_more_to_confirm_it(tmp_path, monkeypatch):
    result, score = _setup(tmp_path, chain_mlp)
    lowered, keep_fp32 = [], fallback.keep_fp32

    def counted(result, fp32):
        lowered.append(len(fp32))
        return keep_fp32(result, fp32)

    monkeypatch.setattr(fallback, "keep_fp32", counted)
    found = fall_back(result, score, score(result.model) + 3, min_gain=2.5, group_size=4)
    assert found.met and lowered == [4, len(found.fp32_nodes)] and len(found.fp32_nodes) < 4


def test_where_the_trials_shrink_a_group_too_far_members_return_until_the_score_confirms_it(
    tmp_path, monkeypatch
):
    result, score = _setup(tmp_path, chain_mlp)
    target = score(result.model) + 3
    lowered, keep_fp32 = [], fallback.keep_fp32

    def counted(result, fp32):
        lowered.append(len(fp32))
        return keep_fp32(result, fp32)

    def trial(model):  # right for the ranking, blind once the group is lowered: every member
        return math.inf if lowered else score(model)  # passes its trial

    monkeypatch.setattr(fallback, "keep_fp32", counted)
    found = fall_back(result, score, target, trial_score=trial, min_gain=2.5, group_size=4)
    assert lowered[:2] == [4, 0] and lowered[1:] == sorted(lowered[1:]) and len(lowered) > 2
    assert found.met and score(found.result.model) >= target - 2.5 / 2
    assert len(found.fp32_nodes) == lowered[-1]


@pytest.mark.parametrize(
    "costs, taken",
    [
        ([GROUP_COST - CLOSE_CALL - 0.01], True),
        ([GROUP_COST + CLOSE_CALL + 0.01], False),
        ([GROUP_COST + 0.05, GROUP_COST - 0.01], True),  # a close call: the longer timing decides
        ([GROUP_COST - 0.05, GROUP_COST + 0.01], False),
    ],
)
def test_a_group_is_taken_only_if_timing_here_shows_it_costing_at_most_group_cost(
    tmp_path, monkeypatch, capsys, costs, taken
):
    result, score = _setup(tmp_path, chain_mlp)
    monkeypatch.setattr("quantize.fallback.timed_here", lambda recipe: True)
    timings = []

    def latencies_ms(result, models, seconds):
        timings.append((list(models), seconds))
        return {"before": 10.0, "after": 10.0 * (1 + costs[len(timings) - 1])}

    monkeypatch.setattr("quantize.fallback.latencies_ms", latencies_ms)
    found = fall_back(result, score, score(result.model) + 3, min_gain=2.5, group_size=4)
    seconds = [CHECK_SECONDS, 2 * CHECK_SECONDS][: len(costs)]
    assert timings == [(["before", "after"], s) for s in seconds]
    assert found.met is taken and bool(found.fp32_nodes) is taken
    # what decided is on the result, so the summary can say why a group was or was not taken
    recorded = found.result.group_cost
    assert recorded.startswith("the group to layer3, ")
    assert f"{1 + costs[-1]:.3f}x the time of the model before it" in recorded
    assert ("a close call" in recorded) is (len(costs) == 2)
    assert recorded.endswith(": taken" if taken else ": not taken")
    assert summarize(found.result)["group_cost"] == recorded
    # and the CLI's line on the fidelity floor says it: a group that would have lifted the score
    # but cost too much is no longer "none helped"
    cli._say_what_fell_back(found, argparse.Namespace(max_drop=None, keep_low_fidelity=False), None)
    assert capsys.readouterr().err.rstrip().endswith(f"; {recorded}")


def test_a_result_no_group_step_was_weighed_for_records_no_group_cost(tmp_path):
    result, score = _setup(tmp_path, chain_mlp)
    found = fall_back(result, score, score(result.model) + 3, min_gain=2.5)
    assert found.result.group_cost == "" and summarize(found.result)["group_cost"] == ""


def test_a_step_the_runtime_cannot_compile_is_passed_over_for_the_next(tmp_path, monkeypatch):
    result, score = _setup(tmp_path, chain_mlp)
    target = score(result.model) + 1
    found = fall_back(result, score, target)
    assert found.fp32_nodes == ["layer2"]  # its trial gains most, the next is layer3's
    assert sorted(found.trial_gains, key=found.trial_gains.get)[-2:] == ["layer3", "layer2"]
    keep_fp32, steps = fallback.keep_fp32, []

    def no_fp32_layer2(result, fp32):
        steps.append(set(fp32))
        if "layer2" in fp32:  # as a recogniser step failed in OpenVINO
            raise CompileError("OpenVINO cannot compile the model: MoveFakeQuantize")
        return keep_fp32(result, fp32)

    monkeypatch.setattr(fallback, "keep_fp32", no_fp32_layer2)
    found = fall_back(result, score, target)
    assert steps == [{"layer2"}, {"layer3"}] and found.fp32_nodes == ["layer3"] and found.met


def test_a_group_stays_whole_where_the_runtime_cannot_compile_it_shrunk(tmp_path, monkeypatch):
    result, score = _setup(tmp_path, chain_mlp)
    keep_fp32 = fallback.keep_fp32

    def whole_group_only(result, fp32):
        if 0 < len(fp32) < 4:
            raise CompileError("OpenVINO cannot compile the model: MoveFakeQuantize")
        return keep_fp32(result, fp32)

    monkeypatch.setattr(fallback, "keep_fp32", whole_group_only)
    found = fall_back(result, score, score(result.model) + 3, min_gain=2.5, group_size=4)
    assert found.met and sorted(found.fp32_nodes) == [f"layer{i}" for i in range(4)]
    assert all("screened together" in d.reason for d in found.result.decisions)


def test_the_fidelity_floor_ranks_its_trials_in_onnx_runtime_and_its_steps_where_the_model_runs(
    tmp_path, monkeypatch
):
    """OpenVINO compiles every model it scores: its trials run the same Q/DQ model in ORT."""
    onnx.save(outlier_mlp(), str(tmp_path / "m.onnx"))
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (32, 16)).astype(np.float32)} for _ in range(8)]
    result = quantize(tmp_path / "m.onnx", feeds, Recipe(kernel_timing=False, runtime="openvino"))
    runs, served_sessions = [], validate.served_sessions

    def recorded(model, batches, threads=0, runtime="onnxruntime"):
        runs.append((batches is result.held_out, runtime))
        return served_sessions(model, batches, threads, runtime)

    monkeypatch.setattr(validate, "served_sessions", recorded)
    found = to_fidelity_floor(result)
    assert found.fp32_nodes == ["down"] and found.trial_gains
    steps = [runtime for held_out, runtime in runs if held_out]
    trials = [runtime for held_out, runtime in runs if not held_out]
    assert set(steps) == {"openvino"} and set(trials) == {"onnxruntime"} and len(trials) > 2


def test_the_fidelity_floor_reads_each_steps_sqnr_off_its_lowering_without_scoring_it_again(
    tmp_path, monkeypatch
):
    """In OpenVINO every score compiles the model: a step is measured once, by its lowering."""
    result, _ = _setup(tmp_path)
    calls = {"lowerings": 0, "held_out_scores": 0}
    keep_fp32, sqnr_against = fallback.keep_fp32, pipeline.sqnr_against

    def counted_keep_fp32(*args):
        calls["lowerings"] += 1
        return keep_fp32(*args)

    def counted_sqnr_against(reference, model, batches, *args):
        calls["held_out_scores"] += batches is result.held_out
        return sqnr_against(reference, model, batches, *args)

    monkeypatch.setattr(fallback, "keep_fp32", counted_keep_fp32)
    for module in (fallback, pipeline):
        monkeypatch.setattr(module, "sqnr_against", counted_sqnr_against)
    found = to_fidelity_floor(result)
    assert found.fp32_nodes and calls["lowerings"] >= 1
    assert calls["held_out_scores"] == calls["lowerings"]
    assert found.score_after == min(found.result.output_sqnr_db.values())
