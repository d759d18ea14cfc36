"""Throughput and latency, measured the same way for every model and runtime.

Models compared in one run are timed in interleaved blocks (A A A, B B B, C C C, A A A, ...),
so that a drift of the machine (frequency, a neighbour's load) affects all of them alike. A
block's first call is discarded: it pays for the previous model's spinning threads and for
caches the previous model evicted.
"""

import time
from collections.abc import Callable

import numpy as np

from quantize.runtime import runtime_session


def compare_sessions(
    models: dict[str, object],
    feeds: dict[str, np.ndarray],
    threads: int = 0,
    min_seconds: float = 3.0,
    rounds: int = 4,
    min_block: int = 3,
    runtime: str = "onnxruntime",
) -> dict[str, dict]:
    """Sessions of `runtime` for each model (in memory or a path) over the same `feeds`."""
    sessions = {name: runtime_session(model, threads, runtime) for name, model in models.items()}
    calls = {name: (lambda s=s: s.run(None, feeds)) for name, s in sessions.items()}
    return compare(calls, len(next(iter(feeds.values()))), min_seconds, rounds, min_block)


def compare(
    calls: dict[str, Callable[[], object]],
    batch: int,
    min_seconds: float = 3.0,
    rounds: int = 4,
    min_block: int = 3,
) -> dict[str, dict]:
    """Samples/s from the median latency of each call, and latency percentiles in ms."""
    latencies: dict[str, list[float]] = {name: [] for name in calls}
    block_seconds = min_seconds / rounds
    for _ in range(rounds):
        for name, call in calls.items():
            call()
            start, done = time.perf_counter(), 0
            while done < min_block or time.perf_counter() - start < block_seconds:
                t = time.perf_counter()
                call()
                latencies[name].append(time.perf_counter() - t)
                done += 1
    return {name: _stats(times, batch) for name, times in latencies.items()}


def _stats(latencies: list[float], batch: int) -> dict:
    ms = np.asarray(latencies) * 1e3
    return {
        "batch": batch,
        "runs": len(latencies),
        "throughput": float(batch / np.median(latencies)),
        "latency_ms_p50": float(np.percentile(ms, 50)),
        "latency_ms_p90": float(np.percentile(ms, 90)),
        "latency_ms_p99": float(np.percentile(ms, 99)),
    }
