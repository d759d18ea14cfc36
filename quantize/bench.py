"""Throughput and latency, measured the same way for every model and runtime.

Models compared in one run are timed in interleaved blocks (A A A, B B B, C C C, A A A, ...),
so that a drift of the machine (frequency, a neighbour's load) affects all of them alike. A
block's first call is discarded: it pays for the previous model's spinning threads and for
caches the previous model evicted.
"""

import os
import threading
import time
from collections.abc import Callable

import numpy as np

from quantize.batcher import core_groups
from quantize.runtime import runtime_session, served_sessions


def compare_sessions(
    models: dict[str, object],
    feeds: dict[str, np.ndarray],
    threads: int = 0,
    min_seconds: float = 3.0,
    rounds: int = 4,
    min_block: int = 3,
    runtime: str | dict[str, str] = "onnxruntime",
) -> dict[str, dict]:
    """Sessions of `runtime` for each model (in memory or a path) over the same `feeds`, each
    compiled for the feeds' shapes where the runtime compiles for shapes (OpenVINO). `runtime`
    may instead name each model's (model name -> runtime)."""
    runtimes = runtime if isinstance(runtime, dict) else dict.fromkeys(models, runtime)
    sessions = {
        name: served_sessions(model, [feeds], threads, runtimes[name])[0]
        for name, model in models.items()
    }
    calls = {name: (lambda s=s: s.run(None, feeds)) for name, s in sessions.items()}
    return compare(calls, len(next(iter(feeds.values()))), min_seconds, rounds, min_block)


def glance_ms(model, feeds: dict[str, np.ndarray], threads: int = 0, calls: int = 5) -> float:
    """Median ms of `calls` runs of `model` in ONNX Runtime after a warm-up: a glance, enough
    to tell a node that costs next to nothing, not a benchmark."""
    sess = runtime_session(model, threads)
    timed = compare({"model": lambda: sess.run(None, feeds)}, 1, 0.0, 1, calls)
    return timed["model"]["latency_ms_p50"]


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


def compare_per_core(
    calls: dict[str, list[Callable[[], object]]],
    batch: int,
    min_seconds: float = 3.0,
    rounds: int = 4,
) -> dict[str, dict]:
    """Samples/s of each model served as the batcher serves it: one single-thread instance per
    core, all running at once, each pinned to its core (`calls[name]` has one call per core,
    each on its own instance). The median of the rounds' throughputs.

    One instance on every core syncs its threads at every node; on a shared VM a descheduled
    vCPU stalls that sync, and a model of many small nodes (INT8's) pays it most. Instances
    that share nothing do not."""
    groups = core_groups(len(next(iter(calls.values()))))
    rates: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, stream_calls in calls.items():
            rates[name].append(batch * _runs_per_second(stream_calls, groups, min_seconds / rounds))
    return {
        name: {"batch": batch, "instances": len(groups), "throughput": float(np.median(r))}
        for name, r in rates.items()
    }


def _runs_per_second(calls: list[Callable[[], object]], groups: list, seconds: float) -> float:
    """Runs/s of `calls` together, each in its own thread on its core group, for `seconds`."""
    ready = threading.Barrier(len(calls))
    rates, errors = [0.0] * len(calls), []

    def stream(i: int) -> None:
        try:
            os.sched_setaffinity(0, groups[i])  # on Linux, 0 is the calling thread, not the process
            calls[i]()  # not counted: it pays for the caches another model evicted
            ready.wait()
            start, done = time.perf_counter(), 0
            while time.perf_counter() - start < seconds:
                calls[i]()
                done += 1
            rates[i] = done / (time.perf_counter() - start)
        except Exception as exc:  # re-raised below; the other streams must not wait for this one
            errors.append(exc)
            ready.abort()

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise next(
            (e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0]
        )
    return sum(rates)


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
