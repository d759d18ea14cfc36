"""Throughput and latency, measured the same way for every model and runtime."""

import time
from typing import Callable

import numpy as np

from quantize.runtime import session


def measure(model, feeds: dict[str, np.ndarray], threads: int = 0, min_seconds: float = 3.0) -> dict:
    """An ONNX Runtime session over `feeds` (one batch shape), timed by `time_calls`."""
    sess = session(model, threads)
    return time_calls(lambda: sess.run(None, feeds), len(next(iter(feeds.values()))), min_seconds)


def time_calls(call: Callable[[], object], batch: int, min_seconds: float = 3.0, min_runs: int = 5, warmup: int = 2) -> dict:
    """Samples/s from the median call latency, and latency percentiles in ms."""
    for _ in range(warmup):
        call()
    latencies = []
    start = time.perf_counter()
    while len(latencies) < min_runs or time.perf_counter() - start < min_seconds:
        t = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - t)
    ms = np.asarray(latencies) * 1e3
    return {
        "batch": batch,
        "runs": len(latencies),
        "throughput": float(batch / np.median(latencies)),
        "latency_ms_p50": float(np.percentile(ms, 50)),
        "latency_ms_p90": float(np.percentile(ms, 90)),
        "latency_ms_p99": float(np.percentile(ms, 99)),
    }
