"""Bin-packing parallel batcher for variable-length work (any model with a length axis).

Requests are sorted by length and packed into batches under a token budget (batch size x
longest member) and a padding cap, so a batch holds requests of similar length. N streams
each pin themselves to their own cores, build their own inference instance there (ONNX
Runtime's intra-op threads inherit the creating thread's affinity) and take batches from one
queue, longest first, so no core idles while another still has a long batch. Results come
back in input order.
"""

import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

RunBatch = Callable[[list], list]  # a batch of requests -> their results, same order


@dataclass(frozen=True)
class BatcherConfig:
    token_budget: int = 2048  # batch size x longest request, padding included
    max_batch: int = 128
    max_padding: float = 0.1  # share of padded positions a batch may hold
    streams: int = 1
    cores_per_stream: int | None = None  # default: the available cores split evenly


def pack(lengths: Sequence[int], token_budget: int, max_batch: int, max_padding: float = 0.1) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest batches first: a batch closes
    when the next request would break the token budget, the batch size or the padding share."""
    if any(n < 1 for n in lengths):
        raise ValueError("every request needs a length >= 1")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current, tokens = [], [], 0
    for i in order:
        if current:
            padded = (len(current) + 1) * lengths[current[0]]
            if padded > token_budget or len(current) == max_batch or 1 - (tokens + lengths[i]) / padded > max_padding:
                batches.append(current)
                current, tokens = [], 0
        current.append(i)
        tokens += lengths[i]
    return batches + [current] if current else batches


def padding_fraction(lengths: Sequence[int], batches: list[list[int]]) -> float:
    """Share of the computed positions that are padding."""
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1 - sum(lengths) / padded if padded else 0.0


def core_groups(streams: int, cores_per_stream: int | None = None) -> list[tuple[int, ...]]:
    cores = sorted(os.sched_getaffinity(0))
    per = cores_per_stream or max(1, len(cores) // streams)
    if streams * per > len(cores):
        raise ValueError(f"{streams} streams x {per} cores need more than the {len(cores)} cores available")
    return [tuple(cores[s * per:(s + 1) * per]) for s in range(streams)]


def run_batches(requests: Sequence[Any], batches: list[list[int]], make_runner: Callable[[int], RunBatch],
                streams: int = 1, cores_per_stream: int | None = None,
                progress: Callable[[int, int], None] = lambda done, total: None) -> list:
    """Run `batches` of `requests` on `streams` pinned streams; results in input order.

    `make_runner(threads)` is called once inside each stream, after pinning, to build that
    stream's inference instance."""
    groups = core_groups(streams, cores_per_stream)
    work: queue.Queue = queue.Queue()
    for batch in batches:
        work.put(batch)
    results: list = [None] * len(requests)
    failures: list[BaseException] = []
    done, lock = [0], threading.Lock()

    def stream(cores: tuple[int, ...]) -> None:
        try:
            os.sched_setaffinity(0, cores)  # this thread only; threads it starts inherit it
            run = make_runner(len(cores))
            while not failures:
                try:
                    batch = work.get_nowait()
                except queue.Empty:
                    return
                outputs = run([requests[i] for i in batch])
                if len(outputs) != len(batch):
                    raise RuntimeError(f"a batch of {len(batch)} requests gave {len(outputs)} results")
                with lock:
                    for i, out in zip(batch, outputs):
                        results[i] = out
                    done[0] += len(batch)
                    progress(done[0], len(requests))
        except BaseException as exc:  # re-raised in the caller's thread below
            failures.append(exc)

    threads = [threading.Thread(target=stream, args=(cores,), daemon=True) for cores in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return results


def run_packed(requests: Sequence[Any], lengths: Sequence[int], make_runner: Callable[[int], RunBatch],
               config: BatcherConfig = BatcherConfig(), progress: Callable[[int, int], None] = lambda done, total: None) -> list:
    """Pack `requests` by `lengths` under the budget and run them on the configured streams."""
    batches = pack(lengths, config.token_budget, config.max_batch, config.max_padding)
    return run_batches(requests, batches, make_runner, config.streams, config.cores_per_stream, progress)
