"""The weight format of a model for a CPU whose U8S8 kernels saturate (the avx2 target).

int7 weights run ONNX Runtime's fast U8S8 kernels exactly; uint8 weights keep all 8 bits but run
its U8U8 kernels, which are slower (quantize/target.py). A model starts from int7, and only if
int7 misses the accuracy goal is uint8 tried, from the same calibration, and it is brought to
the goal only if, with every node INT8, it scores above int7: where the 8th weight bit buys
nothing the error comes from elsewhere (activations, weights beyond the calibrated range), and
uint8's one-node trials would only repeat int7's at a slower speed. Each format is brought to
the goal by the same fallback (nodes back to FP32), uint8 only where int7's found a node worth
its step: finer weights only shrink what a node in FP32 buys back, so where no node was worth
it under int7, none is under uint8, and uint8 is scored whole. uint8 is kept only where it buys
the goal: if only uint8 meets it, uint8; if neither does, int7, the faster (a slower model that
still misses buys nothing the user asked for); if both do, the faster here, timed as the speed
check times, or, when the model is not for this CPU or timing is off, the one with fewer nodes
back in FP32 (int7 on a tie). Nodes that int7's kernel timing kept FP32 stay FP32 in the
uint8 trial: the U8U8 kernels are slower still, so those nodes do not become worth INT8.
"""

from dataclasses import replace
from typing import Protocol

from quantize.fallback import Fallback
from quantize.pipeline import CHECK_SECONDS, QuantizeResult, latencies_ms, timed_here, with_weights


class Goal(Protocol):
    def __call__(self, result: QuantizeResult, max_nodes: int = ...) -> Fallback:
        """`result` brought to the accuracy goal by at most `max_nodes` nodes back in FP32
        (0: only scored), as `fallback.fall_back` and `fallback.to_fidelity_floor` do."""


def choose_weights(result: QuantizeResult, goal: Goal) -> Fallback:
    """`result` (int7 weights) or its uint8 twin, each brought to `goal`; the chosen one's
    result says why in `weight_choice`."""
    if result.recipe.weights != "int7":
        raise ValueError(
            f"the weight choice starts from int7 weights (an avx2 model's first format); "
            f"this model has {result.recipe.weights}"
        )
    int7 = goal(result)
    if int7.score_before >= int7.target:
        return _chosen(int7, f"int7 met the accuracy goal ({_score(int7)})")
    whole_uint8 = goal(with_weights(result, "uint8"), max_nodes=0)
    if whole_uint8.score_before <= int7.score_before:
        return _chosen(
            int7,
            f"int7 {'met' if int7.met else 'missed'} the accuracy goal ({_score(int7)}); uint8 "
            f"scored {whole_uint8.score_before:.4g} with every node INT8, no better than int7's "
            f"{int7.score_before:.4g}: not tried further",
        )
    uint8 = whole_uint8 if whole_uint8.met or not int7.fp32_nodes else goal(whole_uint8.result)
    scores = f"int7 {_score(int7)}, uint8 {_score(uint8)}"
    if int7.met and uint8.met:
        return _faster(int7, uint8, scores)
    if uint8.met:
        return _chosen(uint8, f"only uint8 met the accuracy goal ({scores})")
    if int7.met:
        return _chosen(int7, f"only int7 met the accuracy goal ({scores})")
    return _chosen(int7, f"neither met the accuracy goal ({scores}): int7, the faster")


def _faster(int7: Fallback, uint8: Fallback, scores: str) -> Fallback:
    if not timed_here(int7.result.recipe):
        fewer = uint8 if len(uint8.fp32_nodes) < len(int7.fp32_nodes) else int7
        return _chosen(
            fewer, f"both met the accuracy goal ({scores}), not timed here: fewer nodes in FP32"
        )
    ms = latencies_ms(
        int7.result, {"int7": int7.result.model, "uint8": uint8.result.model}, CHECK_SECONDS
    )
    faster = uint8 if ms["uint8"] < ms["int7"] else int7
    return _chosen(
        faster,
        f"both met the accuracy goal ({scores}): the faster here "
        f"(int7 {ms['int7']:.2f} ms, uint8 {ms['uint8']:.2f} ms a batch)",
    )


def _chosen(found: Fallback, why: str) -> Fallback:
    return replace(found, result=replace(found.result, weight_choice=why))


def _score(found: Fallback) -> str:
    nodes = f" with {len(found.fp32_nodes)} node(s) back in FP32" if found.fp32_nodes else ""
    return f"{found.score_after:.4g}{nodes}"
