"""Accuracy-driven fallback: the fewest nodes back to FP32 for the INT8 model to meet a target.

`score(model) -> float` is the user's metric, higher is better (top-1, BLEU, the worst
sentence's cosine to FP32...). Each INT8 node with a weight is tried once in FP32 with the
rest in INT8 (a trial reuses the calibration: one lowering and one score); then nodes go
back to FP32 in the order of what their trial gained, one at a time, until the score
reaches `target` or `max_nodes` are back. A step that does not raise the score by more than
`min_gain` is undone and ends the search: a node costs speed in FP32, so it goes back only
where it buys fidelity.

Without a task metric, `to_fidelity_floor` scores the output SQNR on the held-out samples:
the CLI's default when a model falls below the floor, so that low fidelity is fixed where a
few nodes can fix it, not only reported. Output noise power adds up over the nodes that make
it, so a node gains less alone than any group it is in: the floor's trials screen the nodes a
group at a time, and try alone only the members of a group that gains enough.
"""

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from quantize.pipeline import QuantizeResult, keep_fp32, qdq_model
from quantize.policy import RULES
from quantize.validate import (
    OUTPUT_FLOOR_DB,
    Reference,
    first_samples,
    reference_outputs,
    sqnr_against,
)

Score = Callable[[onnx.ModelProto], float]
TRIAL_SAMPLES = 8  # held-out samples a one-node trial of the fidelity floor is scored on
TRIAL_GROUP = 8  # nodes the fidelity floor's trials screen together
FLOOR_STEP_DB = 0.5  # what a node back in FP32 must add to the output SQNR (11 % less noise)
REASON = "accuracy fallback"  # how a node this module sends back to FP32 is marked


@dataclass
class Fallback:
    result: QuantizeResult
    target: float
    score_before: float
    score_after: float
    fp32_nodes: list[str]  # in the order they went back
    trial_gains: dict[str, float]  # node -> score with it alone in FP32, minus the score before

    @property
    def met(self) -> bool:
        return self.score_after >= self.target


def fall_back(
    result: QuantizeResult,
    score: Score,
    target: float,
    max_nodes: int = 4,
    trial_score: Score | None = None,
    min_gain: float = 0.0,
    group_size: int = 1,
) -> Fallback:
    """`trial_score`, if given, ranks the one-node trials in place of `score` (a cheaper stand-in
    of it: fewer samples); the steps after are scored with `score` and kept only if they raise
    it by more than `min_gain`. With `group_size` > 1, nodes are first tried `group_size` at a
    time in graph order, and only the members of a group that gains more than `min_gain` are
    tried alone: sound for a metric whose loss adds up over nodes. With `max_nodes=0`, only the
    result's score: no trials."""
    before = score(result.model)
    if before >= target or max_nodes == 0:
        return Fallback(result, target, before, before, [], {})
    trial = trial_score or score
    base = before if trial_score is None else trial(result.model)
    weighted = [
        d.name
        for d in result.decisions
        if d.precision == "int8" and d.op_type in RULES and RULES[d.op_type].weight is not None
    ]
    gains = _trial_gains(result, trial, base, weighted, group_size, min_gain)
    ranked = sorted((n for n in gains if gains[n] > 0), key=gains.get, reverse=True)[:max_nodes]
    chosen: dict[str, str] = {}
    after, best = before, result
    for name in ranked:
        reason = f"{REASON}: alone in FP32 it raised the score by {gains[name]:.4g}"
        step = keep_fp32(result, {**chosen, name: reason})
        step_score = score(step.model)
        if step_score - after <= min_gain:
            break
        chosen[name], best, after = reason, step, step_score
        if after >= target:
            break
    return Fallback(best, target, before, after, list(chosen), gains)


def _trial_gains(
    result: QuantizeResult,
    trial: Score,
    base: float,
    nodes: list[str],
    group_size: int,
    min_gain: float,
) -> dict[str, float]:
    """Each node's trial score alone in FP32 minus `base`, for the nodes of the groups that gain
    more than `min_gain` together (a group of one is its own trial)."""
    groups = [nodes[i : i + group_size] for i in range(0, len(nodes), group_size)]
    screened = [
        group
        for group in groups
        if len(group) == 1 or trial(qdq_model(result, set(group))) - base > min_gain
    ]
    return {name: trial(qdq_model(result, {name})) - base for group in screened for name in group}


def to_fidelity_floor(result: QuantizeResult, max_nodes: int = 8) -> Fallback:
    """Nodes back to FP32 until the worst output's SQNR on the held-out samples reaches the floor,
    each for at least `FLOOR_STEP_DB`; the one-node trials are ranked on the first
    `TRIAL_SAMPLES` of them (a 640x640 text detector has 62 Convs), screened `TRIAL_GROUP` at a
    time. With `max_nodes=0`, only what the result measured."""
    before = min(result.output_sqnr_db.values())
    if before >= OUTPUT_FLOOR_DB or max_nodes == 0:
        return Fallback(result, OUTPUT_FLOOR_DB, before, before, [], {})
    threads = result.options.threads
    trial_batches = [first_samples(result.fp32_model, result.held_out[0], TRIAL_SAMPLES)]

    def worst_output_sqnr(reference: Reference, batches: list[dict]) -> Score:
        return lambda model: min(sqnr_against(reference, model, batches, threads).values())

    return fall_back(
        result,
        worst_output_sqnr(result.fp32_outputs, result.held_out),
        OUTPUT_FLOOR_DB,
        max_nodes,
        worst_output_sqnr(
            reference_outputs(result.fp32_model, trial_batches, threads), trial_batches
        ),
        FLOOR_STEP_DB,
        TRIAL_GROUP,
    )
