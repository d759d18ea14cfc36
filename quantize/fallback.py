"""Accuracy-driven fallback: the fewest nodes back to FP32 for the INT8 model to meet a target.

`score(model) -> float` is the user's metric, higher is better (top-1, BLEU, the worst
sentence's cosine to FP32...). Each INT8 node with a weight is tried once in FP32 with the
rest in INT8 (a trial reuses the calibration: one lowering and one score), and once more
with the INT8 nodes that make its input, if it has any (`input_makers`): a Conv in FP32 still
reads the uint8 its SiLU wrote, so where that rounding is the loss, only the Conv and its
input's makers together remove it. Then these units go back to FP32 in the order of what
their trial gained, one at a time, until the score reaches `target` or `max_nodes` units are
back; a unit larger than its weighted node alone is a candidate only if it gains more than
`min_gain` over it. A step that does not raise the score by more than `min_gain` is undone
and ends the search: a node costs speed in FP32, so it goes back only where it buys fidelity.
Once a step leaves a weighted node writing only to FP32 readers, that node is tried next (and
only undone if it does not gain): in FP32 it writes them float, where in INT8 it rounds.

Without a task metric, `to_fidelity_floor` scores the output SQNR on the held-out samples:
the CLI's default when a model falls below the floor, so that low fidelity is fixed where a
few nodes can fix it, not only reported. Output noise power adds up over the nodes that make
it, so a node gains less alone than any group it is in: the floor's trials screen the nodes a
group at a time, and try on their own only the members of a group that gains enough. Where
errors compound, a group gains more than all its members alone: such a group is a step of its
own, shrunk to the members the floor needs, and taken only if it costs at most GROUP_COST of
the model's time where timing here can tell.
"""

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace

import onnx
import onnx_ir as ir

from quantize.pipeline import (
    CHECK_SECONDS,
    CLOSE_CALL,
    QuantizeResult,
    keep_fp32,
    latencies_ms,
    qdq_model,
    timed_here,
)
from quantize.policy import RULES
from quantize.runtime import CompileError
from quantize.validate import (
    OUTPUT_FLOOR_DB,
    first_samples,
    reference_outputs,
    sqnr_against,
)

Score = Callable[[onnx.ModelProto], float]
TRIAL_SAMPLES = 8  # held-out samples a one-node trial of the fidelity floor is scored on
TRIAL_GROUP = 8  # nodes the fidelity floor's trials screen together
GROUP_COST = 0.1  # the share of time a group back in FP32 may add to the model it is taken into
FLOOR_STEP_DB = 0.5  # what a node back in FP32 must add to the output SQNR (11 % less noise)
REASON = "accuracy fallback"  # how a node this module sends back to FP32 is marked


@dataclass
class Fallback:
    result: QuantizeResult
    target: float
    score_before: float
    score_after: float
    fp32_nodes: list[str]  # in the order they went back
    # node -> score with it alone in FP32, minus the score before
    trial_gains: dict[str, float] = field(default_factory=dict)
    # node -> score with it and its input_makers in FP32, minus the score before (where it has any)
    unit_gains: dict[str, float] = field(default_factory=dict)

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
    measured: Callable[[QuantizeResult], float] | None = None,
) -> Fallback:
    """`measured`, if given, reads `score` off a lowered result that already carries it (the
    fidelity floor's output SQNR, which every lowering measures), instead of scoring its model
    again: in OpenVINO each score compiles the model. `trial_score`, if given, ranks the trials
    in place of `score` (a cheaper stand-in of it: fewer samples); the steps after are scored
    with `score` and kept only if they raise it by more than `min_gain`. With `group_size` > 1,
    weighted nodes are first tried `group_size` at a time in graph order, with their input
    makers, and only the members of a group that gains more than `min_gain` are tried on their
    own: sound for a metric whose loss adds up over nodes. A group that gains more than
    `min_gain` beyond its best member is a step too, then shrunk (`_shrunk`). With
    `max_nodes=0`, only the result's score: no trials."""
    scored = measured or (lambda lowered: score(lowered.model))
    before = scored(result)
    if before >= target or max_nodes == 0:
        return Fallback(result, target, before, before, [])
    trial = trial_score or score
    base = before if trial_score is None else trial(result.model)
    units = _units(result)
    gains, unit_gains, group_gains = _trial_gains(result, trial, base, units, group_size, min_gain)
    candidates = [((name,), gain, "alone", ()) for name, gain in gains.items()]
    candidates += [
        ((name, *units[name]), gain, f"with {', '.join(units[name])} (which make its input)", ())
        for name, gain in unit_gains.items()
        if gain > gains[name] + min_gain
    ]
    candidates += [
        (
            tuple(n for name in group for n in (name, *units[name])),
            gain,
            f"with the {len(group)} weighted nodes to {group[-1]}, screened together",
            group,
        )
        for group, gain in group_gains.items()
        if gain > max(max(gains[n], unit_gains.get(n, gains[n])) for n in group) + min_gain
    ]
    queue = [
        (nodes, f"{nodes[0]} in FP32 {how} raised the score by {gain:.4g}", True, group)
        for nodes, gain, how, group in sorted(candidates, key=lambda c: c[1], reverse=True)
        if gain > 0
    ]
    weighted = [node for node in result.calibration.graph.graph if node.name in units]
    chosen: dict[str, str] = {}
    group_costs: list[str] = []
    after, best, steps = before, result, 0
    while queue and steps < max_nodes and after < target:
        nodes, why, ranked, group = queue.pop(0)
        if set(nodes) <= set(chosen):
            continue
        tried = {**chosen, **dict.fromkeys(nodes, f"{REASON}: {why}")}
        try:
            step = keep_fp32(result, tried)
        except CompileError:  # trials may rank elsewhere than the runtime that scores the steps
            continue
        step_score = scored(step)
        if step_score - after <= min_gain:
            if ranked:  # the ranked steps after it gained less alone
                break
            continue
        if group:
            floor = min(step_score - min_gain / 2, target)
            reached = (tried, step, step_score)
            shrunk = _shrunk(result, scored, trial, reached, group, units, gains, floor)
            taken, cost = _affordable(best, shrunk[1])
            group_costs.append(
                f"the group to {group[-1]}, {len(shrunk[0]) - len(chosen)} node(s) in FP32 "
                f"scoring {shrunk[2]:.4g}: {cost}"
            )
            if not taken:
                continue
            tried, step, step_score = shrunk
        chosen, best, after, steps = tried, step, step_score, steps + 1
        feeders = [n.name for n in weighted if n.name not in chosen and _read_only_by(n, chosen)]
        if feeders:
            queue.insert(0, (tuple(feeders), "every node reading its output is in FP32", False, ()))
    if group_costs:
        best = replace(best, group_cost="; ".join(group_costs))
    return Fallback(best, target, before, after, list(chosen), gains, unit_gains)


def _affordable(before: QuantizeResult, after: QuantizeResult) -> tuple[bool, str]:
    """Does `after` take at most GROUP_COST more time a served batch than `before`, timed as the
    speed check times? And what was measured. A group can hold a model's widest layers: a
    640x640 text detector's stem in FP32 lifted its output SQNR to the floor for a fifth of its
    INT8 speed, when its text map already met its task's target. A first timing within
    CLOSE_CALL of that limit is a close call, and a timing twice as long decides it: YOLOv8n's
    stem in FP32 costs close to the limit in OpenVINO. Where the model is not timed here,
    fidelity decides alone."""
    if not timed_here(before.recipe):
        return True, "not timed here: taken on fidelity alone"
    models = {"before": before.model, "after": after.model}
    ms = latencies_ms(before, models, CHECK_SECONDS)
    timed = "timed once"
    if abs(ms["after"] / ms["before"] - (1 + GROUP_COST)) < CLOSE_CALL:
        ms = latencies_ms(before, models, 2 * CHECK_SECONDS)
        timed = "a close call, timed again twice as long"
    taken = ms["after"] <= ms["before"] * (1 + GROUP_COST)
    return taken, (
        f"{ms['after'] / ms['before']:.3f}x the time of the model before it "
        f"({ms['after']:.2f} vs {ms['before']:.2f} ms a batch; limit {1 + GROUP_COST:.2f}x, "
        f"{timed}): {'taken' if taken else 'not taken'}"
    )


def _shrunk(
    result: QuantizeResult,
    scored: Callable[[QuantizeResult], float],
    trial: Score,
    reached: tuple[dict[str, str], QuantizeResult, float],
    group: tuple[str, ...],
    units: dict[str, list[str]],
    gains: dict[str, float],
    floor: float,
) -> tuple[dict[str, str], QuantizeResult, float]:
    """`reached` (the FP32 nodes, the result and its score with a whole group in FP32) with each
    member of `group`, with its input makers, back in INT8 where the score stays at or above
    `floor`: the members tried in the order of what they gained alone, least first. A group
    gains where its members' errors compound (YOLOv8n's first three Convs in FP32 together lift
    its output SQNR by several dB, each alone by less than the floor's step), but not every
    member need be FP32 for that. A member is tried as the ranking trials are, on `trial` and a
    quick Q/DQ model, and goes back to INT8 where its trial score stays at or above `floor` as
    the trials read it (shifted by what they read above `scored` on the whole group: 8 samples
    may read above 64). One lowering then confirms them all with `scored`; where it does not,
    the last member back returns to FP32 until it does. A lowering is what a step costs on a
    large model (a 640x640 text detector): there is one a group, not one a member."""
    chosen, _, after = reached
    reads_above = trial(qdq_model(result, set(chosen))) - after if math.isfinite(after) else 0.0
    allowed = floor + reads_above  # `floor` as the trials read it
    kept, back = chosen, []
    for member in sorted(group, key=gains.__getitem__):
        tried = {k: v for k, v in kept.items() if k not in (member, *units[member])}
        if trial(qdq_model(result, set(tried))) >= allowed:
            kept, back = tried, [*back, member]
    while back:
        try:
            step = keep_fp32(result, kept)
            step_score = scored(step)
        except CompileError:  # the runtime cannot compile it: as good as below the floor
            step_score = -math.inf
        if step_score >= floor:
            return kept, step, step_score
        member = back.pop()
        kept = {**kept, **{n: chosen[n] for n in (member, *units[member]) if n in chosen}}
    return reached


def _read_only_by(node: ir.Node, names: Collection[str]) -> bool:
    """Does nothing but the nodes in `names` read what `node` writes (no graph output either)?"""
    readers = {use.node.name for out in node.outputs for use in out.uses()}
    return readers <= set(names) and not any(out.is_graph_output() for out in node.outputs)


def _units(result: QuantizeResult) -> dict[str, list[str]]:
    """Each INT8 node with a weight -> its `input_makers`, in graph order."""
    decided = {d.name: d for d in result.decisions if d.precision == "int8"}
    weighted = {
        name for name, d in decided.items() if d.op_type in RULES and RULES[d.op_type].weighted
    }
    graph = result.calibration.graph.graph
    return {
        node.name: input_makers(node, set(decided) - weighted)
        for node in graph
        if node.name in weighted
    }


def input_makers(node: ir.Node, free: set[str]) -> list[str]:
    """The nodes named in `free` that `node`'s data input is made by, walking back from it
    through such nodes only, each taken only if nothing else reads what it writes: in FP32
    with `node`, they let it read its input unrounded. Sorted by name."""
    unit, pending = {node.name}, [node.inputs[0]]
    while pending:
        maker = pending.pop().producer()
        if maker is None or maker.name in unit or maker.name not in free:
            continue
        if _read_only_by(maker, unit):
            unit.add(maker.name)
            pending += [value for value in maker.inputs if value is not None]
    return sorted(unit - {node.name})


def _trial_gains(
    result: QuantizeResult,
    trial: Score,
    base: float,
    units: dict[str, list[str]],
    group_size: int,
    min_gain: float,
) -> tuple[dict[str, float], dict[str, float], dict[tuple[str, ...], float]]:
    """The trial score minus `base` of each weighted node alone in FP32, and with its input
    makers, for the nodes of the groups that gain more than `min_gain` together (each with its
    makers; a group of one is its own trial); and those groups' own gains."""
    nodes = list(units)
    groups = [nodes[i : i + group_size] for i in range(0, len(nodes), group_size)]

    def together(group: list[str]) -> set[str]:
        return {n for name in group for n in (name, *units[name])}

    group_gains = {
        tuple(group): trial(qdq_model(result, together(group))) - base
        for group in groups
        if len(group) > 1
    }
    screened = [
        name
        for group in groups
        if group_gains.get(tuple(group), math.inf) > min_gain
        for name in group
    ]
    alone = {name: trial(qdq_model(result, {name})) - base for name in screened}
    with_makers = {
        name: trial(qdq_model(result, together([name]))) - base for name in screened if units[name]
    }
    gaining = {group: gain for group, gain in group_gains.items() if gain > min_gain}
    return alone, with_makers, gaining


def to_fidelity_floor(result: QuantizeResult, max_nodes: int = 8) -> Fallback:
    """Nodes back to FP32 until the worst output's SQNR on the held-out samples reaches the floor,
    each for at least `FLOOR_STEP_DB`; the one-node trials are ranked on the first
    `TRIAL_SAMPLES` of them (a 640x640 text detector has 62 Convs), screened `TRIAL_GROUP` at a
    time. With `max_nodes=0`, only what the result measured."""
    before = min(result.output_sqnr_db.values())
    if before >= OUTPUT_FLOOR_DB or max_nodes == 0:
        return Fallback(result, OUTPUT_FLOOR_DB, before, before, [])
    threads, runtime = result.options.threads, result.recipe.runtime
    trial_batches = [first_samples(result.fp32_model, result.held_out[0], TRIAL_SAMPLES)]
    trial_reference = reference_outputs(result.fp32_model, trial_batches, threads)

    def trial_sqnr(model: onnx.ModelProto) -> float:
        # in ONNX Runtime whatever the recipe's runtime: the same Q/DQ arithmetic, where OpenVINO
        # would compile each trial, seconds apiece on YOLOv8n
        return min(sqnr_against(trial_reference, model, trial_batches, threads).values())

    return fall_back(
        result,
        lambda model: min(
            sqnr_against(result.fp32_outputs, model, result.held_out, threads, runtime).values()
        ),
        OUTPUT_FLOOR_DB,
        max_nodes,
        trial_sqnr,
        FLOOR_STEP_DB,
        TRIAL_GROUP,
        measured=lambda lowered: min(lowered.output_sqnr_db.values()),
    )
