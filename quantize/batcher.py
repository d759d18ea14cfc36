"""Bin-packing parallel batcher for variable-length work (any model with a length axis).

Requests are sorted by length and packed into batches under a token budget (batch size x
longest member) and a padding cap, so a batch holds requests of similar length. N streams
are worker processes, each pinned to its own cores, each building its own inference instance
there; they take batches from one queue, longest first, so no core idles while another still
has a long batch. Results come back in input order.

Streams are processes, not threads: the Python around each inference call (tokenising, the
decoder loop, numpy glue) holds the GIL, and with threads two streams of a fast INT8 model
spent 10-15 % of their time waiting for each other.
"""

import gc
import multiprocessing
import os
import pickle
import queue
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

RunBatch = Callable[[list], list]  # a batch of requests -> their results, same order
Progress = Callable[[int, int], None]  # (requests done, requests in the run)


def quiet(done: int, total: int) -> None:
    """The default Progress: says nothing."""


@dataclass(frozen=True)
class BatcherConfig:
    token_budget: int = 2048  # batch size x longest request, padding included
    max_batch: int = 128
    max_padding: float = 0.1  # share of padded positions a batch may hold
    streams: int = 1
    cores_per_stream: int | None = None  # default: the available cores split evenly

    def __post_init__(self):
        if min(self.token_budget, self.max_batch, self.streams, self.cores_per_stream or 1) < 1:
            raise ValueError(
                "token_budget, max_batch, streams and cores_per_stream must be at least 1"
            )
        if not 0 <= self.max_padding < 1:
            raise ValueError("max_padding must be in [0, 1)")


def pack(
    lengths: Sequence[int], token_budget: int, max_batch: int, max_padding: float = 0.1
) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest batches first: a batch closes
    when the next request would break the token budget, the batch size or the padding share."""
    if any(n < 1 for n in lengths):
        raise ValueError("every request needs a length >= 1")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current, tokens = [], [], 0
    for i in order:
        if current:
            padded = (len(current) + 1) * lengths[current[0]]
            if (
                padded > token_budget
                or len(current) == max_batch
                or 1 - (tokens + lengths[i]) / padded > max_padding
            ):
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
    if streams < 1 or (cores_per_stream is not None and cores_per_stream < 1):
        raise ValueError(f"{streams} streams x {cores_per_stream} cores: both must be at least 1")
    cores = sorted(os.sched_getaffinity(0))
    per = cores_per_stream or max(1, len(cores) // streams)
    if streams * per > len(cores):
        raise ValueError(
            f"{streams} streams x {per} cores need more than the {len(cores)} cores available"
        )
    return [tuple(cores[s * per : (s + 1) * per]) for s in range(streams)]


class StreamPool:
    """`streams` worker processes pinned to their own cores, each holding the inference
    instance `make_runner(threads)` built after pinning; reused by every `run` until closed.

    Workers are forked, so `make_runner` may be any callable (a closure too); requests and
    results travel between processes by pickling."""

    def __init__(
        self,
        make_runner: Callable[[int], RunBatch],
        streams: int = 1,
        cores_per_stream: int | None = None,
    ):
        context = multiprocessing.get_context("fork")
        # Garbage left here would be finalized in the children: a Ray client's objects (after
        # ray.shutdown) then abort the child as they stop threads that did not survive the fork.
        gc.collect()
        self._tasks, self._results = context.Queue(), context.Queue()
        self._workers = [
            context.Process(
                target=_serve, args=(cores, make_runner, self._tasks, self._results), daemon=True
            )
            for cores in core_groups(streams, cores_per_stream)
        ]
        for worker in self._workers:
            worker.start()
        try:
            for _ in self._workers:
                _, failure = self._next_result()
                if failure is not None:
                    raise failure
        except BaseException:
            self._terminate()
            raise

    def run(self, requests: Sequence[Any], batches: list[list[int]], progress: Progress = quiet):
        """Results of `batches` of `requests`, in input order; a failing batch raises here and
        closes the pool (its streams may still hold queued batches of this run)."""
        if not self._workers:
            raise RuntimeError(
                "this StreamPool is closed (by close() or a failed run): make a new one"
            )
        for number, batch in enumerate(batches):
            self._tasks.put((number, [requests[i] for i in batch]))
        results: list = [None] * len(requests)
        done = 0
        try:
            for _ in batches:
                number, outputs = self._next_result()
                if isinstance(outputs, BaseException):
                    raise outputs
                outputs = pickle.loads(outputs)
                batch = batches[number]
                if len(outputs) != len(batch):
                    raise RuntimeError(
                        f"a batch of {len(batch)} requests gave {len(outputs)} results"
                    )
                for i, out in zip(batch, outputs):
                    results[i] = out
                done += len(batch)
                progress(done, len(requests))
        except BaseException:
            self._terminate()
            raise
        return results

    def close(self) -> None:
        for worker in self._workers:
            if worker.is_alive():
                self._tasks.put(None)
        for worker in self._workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.terminate()
        self._workers = []

    def _terminate(self) -> None:
        for worker in self._workers:
            worker.terminate()
            worker.join()
        self._workers = []

    def __enter__(self) -> "StreamPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _next_result(self) -> tuple:
        while True:
            try:
                return self._results.get(timeout=1)
            except queue.Empty:
                dead = [w.exitcode for w in self._workers if not w.is_alive()]
                if dead:
                    raise RuntimeError(f"a stream process died (exit code {dead[0]})") from None


def _serve(cores: tuple[int, ...], make_runner: Callable[[int], RunBatch], tasks, results) -> None:
    """One stream: pin, build the runner, report ready (or why not), then run batches until told to stop."""
    try:
        os.sched_setaffinity(0, cores)  # ONNX Runtime's intra-op threads inherit it
        run = make_runner(len(cores))
    except BaseException as exc:
        results.put((None, _picklable(exc)))
        return
    results.put((None, None))
    while (task := tasks.get()) is not None:
        number, batch = task
        try:
            # pickled here, not in the queue's feeder thread: results that cannot travel
            # then fail their batch instead of leaving the caller waiting
            results.put((number, pickle.dumps(run(batch))))
        except BaseException as exc:
            results.put((number, _picklable(exc)))


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def run_batches(
    requests: Sequence[Any],
    batches: list[list[int]],
    make_runner: Callable[[int], RunBatch],
    streams: int = 1,
    cores_per_stream: int | None = None,
    progress: Progress = quiet,
) -> list:
    """Run `batches` of `requests` on a fresh pool of `streams` pinned streams; results in input order."""
    with StreamPool(make_runner, streams, cores_per_stream) as pool:
        return pool.run(requests, batches, progress)


def run_packed(
    requests: Sequence[Any],
    lengths: Sequence[int],
    make_runner: Callable[[int], RunBatch],
    config: BatcherConfig = BatcherConfig(),
    progress: Progress = quiet,
) -> list:
    """Pack `requests` by `lengths` under the budget and run them on the configured streams."""
    batches = pack(lengths, config.token_budget, config.max_batch, config.max_padding)
    return run_batches(
        requests, batches, make_runner, config.streams, config.cores_per_stream, progress
    )
