"""Timing helpers (quantize/bench.py): what runs where, not how fast."""

import os
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from quantize.batcher import core_groups
from quantize.bench import compare_per_core, glance_ms
from quantize.kernel_timing import MIN_GAIN_MS


def test_per_core_instances_run_at_once_each_pinned_to_its_own_core():
    cores = len(os.sched_getaffinity(0))
    groups = core_groups(cores)
    seen = [set() for _ in groups]
    running, most = set(), [0]
    lock = threading.Lock()

    def call(i):
        def run():
            seen[i].add(tuple(sorted(os.sched_getaffinity(0))))
            with lock:
                running.add(i)
                most[0] = max(most[0], len(running))
            threading.Event().wait(0.002)
            with lock:
                running.discard(i)

        return run

    before = os.sched_getaffinity(0)
    speed = compare_per_core({"m": [call(i) for i in range(cores)]}, batch=4, min_seconds=0.2)
    assert seen == [{g} for g in groups]
    assert most[0] == cores  # every instance was running at the same moment
    assert os.sched_getaffinity(0) == before  # the caller's own affinity is untouched
    assert speed["m"]["instances"] == cores and speed["m"]["throughput"] > 0


def test_an_instance_that_fails_raises_its_error_instead_of_leaving_the_others_waiting():
    cores = len(os.sched_getaffinity(0))

    def fail():
        raise ValueError("the model does not run")

    calls = [fail] + [lambda: None] * (cores - 1)
    with pytest.raises(ValueError, match="does not run"):
        compare_per_core({"m": calls}, batch=1, min_seconds=0.1)


def _square_matmul(n: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "m", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_glance_tells_a_node_of_microseconds_from_one_of_milliseconds():
    tiny, large = (
        # the median of 25 calls: of 5, one descheduled vCPU put a 2x2 MatMul at 0.054 ms in CI
        glance_ms(_square_matmul(n), {"x": np.ones((n, n), np.float32)}, threads=1, calls=25)
        for n in (2, 384)
    )
    assert 0 < tiny < MIN_GAIN_MS < large
