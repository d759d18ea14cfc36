import os
import time

import numpy as np
import pytest

from quantize.batcher import (
    BatcherConfig,
    StreamPool,
    core_groups,
    pack,
    padding_fraction,
    run_batches,
    run_packed,
)


def test_packing_respects_the_token_budget_and_covers_every_request_once():
    lengths = list(np.random.default_rng(0).integers(1, 80, size=500))
    batches = pack(lengths, token_budget=512, max_batch=64)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        longest = max(lengths[i] for i in b)
        assert len(b) <= 64
        assert len(b) == 1 or len(b) * longest <= 512
        assert 1 - sum(lengths[i] for i in b) / (len(b) * longest) <= 0.1


def test_packing_by_length_pads_far_less_than_arrival_order():
    lengths = list(np.random.default_rng(1).integers(1, 60, size=1000))
    packed = pack(lengths, token_budget=1024, max_batch=128)
    arrival = [list(range(i, min(i + 32, 1000))) for i in range(0, 1000, 32)]
    assert padding_fraction(lengths, packed) <= 0.1
    assert padding_fraction(lengths, arrival) > 0.4


def test_a_request_longer_than_the_budget_gets_a_batch_of_its_own():
    assert pack([500, 3, 3], token_budget=100, max_batch=8) == [[0], [1, 2]]


def test_lengths_must_be_positive():
    with pytest.raises(ValueError):
        pack([3, 0], 100, 8)


def test_results_come_back_in_input_order_from_parallel_pinned_stream_processes():
    requests = [f"r{i}" * (i % 7 + 1) for i in range(200)]

    def make_runner(threads):
        where = (os.getpid(), tuple(sorted(os.sched_getaffinity(0))), threads)

        def run(batch):
            time.sleep(
                0.05
            )  # work that lasts: on a loaded machine a stream started late still gets batches
            return [(r.upper(), where) for r in batch]

        return run

    streams = min(2, len(os.sched_getaffinity(0)))
    before = os.sched_getaffinity(0)
    out = run_packed(
        requests,
        [len(r) for r in requests],
        make_runner,
        BatcherConfig(token_budget=40, streams=streams),
    )
    assert [text for text, _ in out] == [r.upper() for r in requests]
    streams_seen = {where for _, where in out}
    assert {pid for pid, _, _ in streams_seen}.isdisjoint({os.getpid()})
    assert sorted(cores for _, cores, _ in streams_seen) == sorted(core_groups(streams))
    assert all(threads == len(cores) for _, cores, threads in streams_seen)
    assert os.sched_getaffinity(0) == before  # pinning applies to the stream processes only


def test_a_pool_serves_many_runs_with_the_instances_it_built_once():
    def make_runner(threads):
        calls = []

        def run(batch):
            calls.append(len(batch))
            return [(r, os.getpid(), len(calls)) for r in batch]

        return run

    with StreamPool(make_runner, streams=1) as pool:
        first = pool.run(list("abcd"), [[0, 1], [2, 3]])
        second = pool.run(list("xy"), [[1, 0]])
    assert [r for r, _, _ in first] == list("abcd") and [r for r, _, _ in second] == list("xy")
    assert len({pid for _, pid, _ in first + second}) == 1
    assert [n for _, _, n in second] == [3, 3]  # the same instance, third call


def test_progress_reaches_the_total_and_a_failing_batch_raises_in_the_caller():
    progress = []
    run_batches(
        list(range(10)),
        [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9]],
        lambda t: lambda b: b,
        progress=lambda d, n: progress.append((d, n)),
    )
    assert progress[-1] == (10, 10)

    def broken(threads):
        return lambda batch: batch[:-1]

    with pytest.raises(RuntimeError, match="gave"):
        run_batches(list(range(4)), [[0, 1], [2, 3]], broken)

    def failing(batch):
        raise ValueError(f"cannot take {batch}")

    with pytest.raises(ValueError, match="cannot take"):
        run_batches(list(range(4)), [[0, 1], [2, 3]], lambda threads: failing)
    with pytest.raises(OSError, match="no model here"):
        run_batches([1], [[0]], lambda threads: open("/nonexistent/no model here"))


def test_a_stream_process_that_dies_is_reported_instead_of_waited_for():
    with pytest.raises(RuntimeError, match="died"):
        run_batches([1, 2], [[0], [1]], lambda threads: lambda batch: os._exit(3))


def test_results_that_cannot_be_pickled_fail_their_batch_instead_of_hanging():
    with pytest.raises(Exception, match="pickle"):
        run_batches([1, 2], [[0, 1]], lambda threads: lambda batch: [lambda: x for x in batch])  # noqa: B023 - unpicklable on purpose


def test_too_many_streams_for_the_cores_is_refused():
    with pytest.raises(ValueError, match="cores"):
        core_groups(len(os.sched_getaffinity(0)) + 1, 1)


def test_a_pool_after_a_failed_run_or_close_refuses_at_once_instead_of_waiting():
    def failing(batch):
        raise ValueError("bad batch")

    pool = StreamPool(lambda threads: failing)
    with pytest.raises(ValueError, match="bad batch"):
        pool.run([1, 2], [[0, 1]])
    with pytest.raises(RuntimeError, match="closed"):
        pool.run([1, 2], [[0, 1]])
    with StreamPool(lambda threads: lambda batch: batch) as pool:
        assert pool.run([1, 2], [[0], [1]]) == [1, 2]
    with pytest.raises(RuntimeError, match="closed"):
        pool.run([1, 2], [[0, 1]])


@pytest.mark.parametrize("streams", [0, -1])
def test_no_stream_at_all_is_refused(streams):
    with pytest.raises(ValueError, match="at least 1"):
        core_groups(streams)
    with pytest.raises(ValueError, match="at least 1"):
        BatcherConfig(streams=streams)


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--streams", "0", "must be at least 1"),
        ("--streams", "-1", "must be at least 1"),
        ("--streams", "99", "cores, one stream needs one"),
        ("--beam", "0", "must be at least 1"),
    ],
)
def test_translate_options_out_of_range_get_one_line_and_exit_2(option, value, expected):
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "models.translator", "translate", option, value],
        input="",
        capture_output=True,
        text=True,
    )
    assert (
        run.returncode == 2
        and expected in run.stderr.strip().splitlines()[-1]
        and "Traceback" not in run.stderr
    )
