"""The batcher's streams past one machine: StreamPool's contract on a Ray cluster.

One Ray actor per stream holds the inference instance `make_runner(threads)` built after it
pinned itself to its own cores, as a StreamPool worker does: actors that share a host (Ray
nodes on one machine count as one host) take disjoint core groups. The driver hands out the
packed batches, two in flight per actor so no actor waits on a round trip, and puts the
results back in input order.

A stream that dies (its actor, or the whole node under it) loses nothing: its batches go back
in the queue and run on the streams left. A batch whose runner raises stops the run with the
batch's position; there is no retry for an error the runner would raise again.

Ray Core actors rather than Ray Data `map_batches`: the jobs here are already cut into blocks
by the bin-packing batcher and the shards (quantize/shards.py), results must come back in input
order, and a resumed job must know which blocks are on disk; Ray Data would add a dataset layer
(and pyarrow) over the same actor pool without doing any of that for us.
"""

import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from quantize.batcher import Progress, RunBatch, StreamPool, quiet

IN_FLIGHT_PER_STREAM = 2


def _ray():
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            "scale-out needs Ray: pip install -e '.[ray]' (or pip install ray)"
        ) from None
    return ray


def connect(address: str | None = None):
    """The Ray module, connected: to `address` ("auto", "ray://...", host:port) or, with None,
    to a Ray started here on this process's cores."""
    ray = _ray()
    if not ray.is_initialized():
        # "local": start one here even where another Ray already runs on this machine
        options = {"address": address or "local"}
        if not address:
            options["num_cpus"] = len(os.sched_getaffinity(0))
        ray.init(**options, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    return ray


class _Stream:
    """One stream in its own Ray worker process: pinned, then holding its runner."""

    def __init__(self, make_runner: Callable[[int], RunBatch], cores_per_stream: int):
        self._make_runner, self._threads, self._run = make_runner, cores_per_stream, None

    def host(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def start(self, slot: int) -> tuple[int, ...]:
        """Pin to core group `slot` of this host (unpinned if the host has too few cores), then
        build the runner; returns the cores."""
        cores = sorted(os.sched_getaffinity(0))
        group = tuple(cores[slot * self._threads : (slot + 1) * self._threads])
        if len(group) == self._threads:
            os.sched_setaffinity(0, group)  # ONNX Runtime's intra-op threads inherit it
        self._run = self._make_runner(self._threads)
        return group

    def run(self, batch: list) -> list:
        return self._run(batch)


class RayPool:
    """`streams` Ray actors (default: every CPU the cluster has, `cores_per_stream` each), each
    pinned and holding `make_runner(threads)`; reused by every `run` until closed.

    `make_runner` travels to the actors by pickling (cloudpickle: closures work), so it should
    capture paths, not open sessions."""

    def __init__(
        self,
        make_runner: Callable[[int], RunBatch],
        streams: int | None = None,
        cores_per_stream: int = 1,
        address: str | None = None,
    ):
        ray = connect(address)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if streams is None:
            streams = max(1, cpus // cores_per_stream)
        if streams < 1 or cores_per_stream < 1:
            raise ValueError(
                f"{streams} streams x {cores_per_stream} cores: both must be at least 1"
            )
        if streams * cores_per_stream > cpus:  # Ray would wait for CPUs that never come
            raise ValueError(
                f"{streams} streams x {cores_per_stream} cores need more than the {cpus} CPUs "
                "of this Ray cluster"
            )
        self._ray = ray
        self.streams_lost = 0  # streams that died under a run; their batches ran elsewhere
        stream = ray.remote(num_cpus=cores_per_stream)(_Stream)
        self._actors = [stream.remote(make_runner, cores_per_stream) for _ in range(streams)]
        hosts = ray.get([actor.host.remote() for actor in self._actors])
        slots = [hosts[:i].count(host) for i, host in enumerate(hosts)]
        try:
            ray.get([actor.start.remote(slot) for actor, slot in zip(self._actors, slots)])
        except ray.exceptions.RayError as exc:
            self.close()
            raise RuntimeError(f"a stream could not start: {_cause(exc)}") from None

    @property
    def streams(self) -> int:
        return len(self._actors)

    def run(self, requests: Sequence[Any], batches: list[list[int]], progress: Progress = quiet):
        """Results of `batches` of `requests`, in input order. Batches of a stream that dies are
        run again on the others; a batch whose runner raises stops the run, naming it."""
        ray = self._ray
        if not self._actors:
            raise RuntimeError("this RayPool is closed, or every stream in it died: make a new one")
        waiting = deque(range(len(batches)))
        in_flight: dict = {}  # object ref -> (actor, batch number)
        results: list = [None] * len(requests)
        done = 0
        while waiting or in_flight:
            for actor in self._actors:
                busy = sum(1 for owner, _ in in_flight.values() if owner is actor)
                for _ in range(IN_FLIGHT_PER_STREAM - busy):
                    if waiting:
                        number = waiting.popleft()
                        ref = actor.run.remote([requests[i] for i in batches[number]])
                        in_flight[ref] = (actor, number)
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            actor, number = in_flight.pop(ref)
            try:
                outputs = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
                self._drop(actor)
                waiting.appendleft(number)
                continue
            except ray.exceptions.RayTaskError as exc:
                raise RuntimeError(
                    f"batch {number} (requests {_positions(batches[number])}) failed: {_cause(exc)}"
                ) from None
            if len(outputs) != len(batches[number]):
                raise RuntimeError(
                    f"a batch of {len(batches[number])} requests gave {len(outputs)} results"
                )
            for i, out in zip(batches[number], outputs):
                results[i] = out
            done += len(outputs)
            progress(done, len(requests))
        return results

    def _drop(self, actor) -> None:
        if actor in self._actors:
            self._actors.remove(actor)
            self.streams_lost += 1
        if not self._actors:
            raise RuntimeError("every stream of this RayPool died; the batches left did not run")

    def close(self) -> None:
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def pool_factory(ray_address: str | None, streams: int) -> Callable:
    """`make_runner -> pool` for a command's `--ray [ADDRESS]` flag: a RayPool on the cluster at
    the address ("local": a Ray started here) with every CPU it has, or without the flag a
    StreamPool of `streams` streams on this machine."""
    if not ray_address:
        return lambda make_runner: StreamPool(make_runner, streams=streams)
    address = None if ray_address == "local" else ray_address
    return lambda make_runner: RayPool(make_runner, address=address)


def _positions(batch: list[int]) -> str:
    shown = ", ".join(map(str, sorted(batch)[:5]))
    return shown + (f" and {len(batch) - 5} more" if len(batch) > 5 else "")


def _cause(exc: Exception) -> str:
    cause = getattr(exc, "cause", None) or exc
    return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"
