"""Throughput and latency of a model under ONNX Runtime, measured the same way for every model."""

import time

import numpy as np

from quantize.runtime import session


def measure(model, feeds: dict[str, np.ndarray], threads: int = 0, min_seconds: float = 3.0, min_runs: int = 5, warmup: int = 2) -> dict:
    """Samples/s from the median batch latency, and latency percentiles in ms, for one batch shape."""
    sess = session(model, threads)
    for _ in range(warmup):
        sess.run(None, feeds)
    latencies = []
    start = time.perf_counter()
    while len(latencies) < min_runs or time.perf_counter() - start < min_seconds:
        t = time.perf_counter()
        sess.run(None, feeds)
        latencies.append(time.perf_counter() - t)
    batch = len(next(iter(feeds.values())))
    ms = np.asarray(latencies) * 1e3
    return {
        "batch": batch,
        "runs": len(latencies),
        "throughput": float(batch / np.median(latencies)),
        "latency_ms_p50": float(np.percentile(ms, 50)),
        "latency_ms_p90": float(np.percentile(ms, 90)),
        "latency_ms_p99": float(np.percentile(ms, 99)),
    }
