"""The weight format of a model for a CPU whose U8S8 kernels saturate (the avx2 target).

An avx2 model starts from paired weights (int7 in OpenVINO), which run ONNX Runtime's fast U8S8
kernels exactly; uint8 weights keep all 8 bits but run its U8U8 kernels, which are slower
(quantize/target.py). Only if the first format misses the accuracy goal is uint8 tried, from the
same calibration, and it is brought to the goal only if, with every node INT8, it scores above
the first: where the 8th weight bit buys nothing the error comes from elsewhere (activations,
weights beyond the calibrated range), and uint8's one-node trials would only repeat the first's
at a slower speed. Each format is brought to the goal by the same fallback (nodes back to FP32),
uint8 only where the first's found a node worth its step: finer weights only shrink what a node
in FP32 buys back, so where no node was worth it under the first format, none is under uint8,
and uint8 is scored whole. uint8 is kept only where it buys the goal: if only uint8 meets it,
uint8; if neither does, the first, the faster (a slower model that still misses buys nothing the
user asked for); if both do, the faster here, timed as the speed check times, or, when the model
is not for this CPU or timing is off, the one with fewer nodes back in FP32 (the first on a
tie). Nodes that the first's kernel timing kept FP32 stay FP32 in the uint8 trial: the U8U8
kernels are slower still, so those nodes do not become worth INT8.
"""

from dataclasses import replace
from typing import Protocol

from quantize.fallback import Fallback
from quantize.pipeline import CHECK_SECONDS, QuantizeResult, latencies_ms, timed_here, with_weights
from quantize.recipe import NARROW_WEIGHTS


class Goal(Protocol):
    def __call__(self, result: QuantizeResult, max_nodes: int = ...) -> Fallback:
        """`result` brought to the accuracy goal by at most `max_nodes` nodes back in FP32
        (0: only scored), as `fallback.fall_back` and `fallback.to_fidelity_floor` do."""


def choose_weights(result: QuantizeResult, goal: Goal) -> Fallback:
    """`result` (paired or int7 weights) or its uint8 twin, each brought to `goal`; the chosen
    one's result says why in `weight_choice`."""
    first_format = result.recipe.weights
    if first_format not in NARROW_WEIGHTS:
        raise ValueError(
            f"the weight choice starts from {' or '.join(NARROW_WEIGHTS)} weights (an avx2 "
            f"model's first format); this model has {first_format}"
        )
    first = goal(result)
    if first.score_before >= first.target:
        return _chosen(first, f"{first_format} met the accuracy goal ({_score(first)})")
    whole_uint8 = goal(with_weights(result, "uint8"), max_nodes=0)
    if whole_uint8.score_before <= first.score_before:
        return _chosen(
            first,
            f"{first_format} {'met' if first.met else 'missed'} the accuracy goal "
            f"({_score(first)}); uint8 scored {whole_uint8.score_before:.4g} with every node "
            f"INT8, no better than {first_format}'s {first.score_before:.4g}: not tried further",
        )
    uint8 = whole_uint8 if whole_uint8.met or not first.fp32_nodes else goal(whole_uint8.result)
    scores = f"{first_format} {_score(first)}, uint8 {_score(uint8)}"
    if first.met and uint8.met:
        return _faster(first, uint8, scores)
    if uint8.met:
        return _chosen(uint8, f"only uint8 met the accuracy goal ({scores})")
    if first.met:
        return _chosen(first, f"only {first_format} met the accuracy goal ({scores})")
    return _chosen(first, f"neither met the accuracy goal ({scores}): {first_format}, the faster")


def _faster(first: Fallback, uint8: Fallback, scores: str) -> Fallback:
    if not timed_here(first.result.recipe):
        fewer = uint8 if len(uint8.fp32_nodes) < len(first.fp32_nodes) else first
        return _chosen(
            fewer, f"both met the accuracy goal ({scores}), not timed here: fewer nodes in FP32"
        )
    first_format = first.result.recipe.weights
    ms = latencies_ms(
        first.result, {first_format: first.result.model, "uint8": uint8.result.model}, CHECK_SECONDS
    )
    faster = uint8 if ms["uint8"] < ms[first_format] else first
    return _chosen(
        faster,
        f"both met the accuracy goal ({scores}): the faster here "
        f"({first_format} {ms[first_format]:.2f} ms, uint8 {ms['uint8']:.2f} ms a batch)",
    )


def _chosen(found: Fallback, why: str) -> Fallback:
    return replace(found, result=replace(found.result, weight_choice=why))


def _score(found: Fallback) -> str:
    nodes = f" with {len(found.fp32_nodes)} node(s) back in FP32" if found.fp32_nodes else ""
    return f"{found.score_after:.4g}{nodes}"
