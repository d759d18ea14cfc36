import os
import numpy as np
import pytest

from quantize.batcher import BatcherConfig, core_groups, pack, padding_fraction, run_batches, run_packed


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


def test_results_come_back_in_input_order_from_parallel_pinned_streams():
    requests = [f"r{i}" * (i % 7 + 1) for i in range(200)]
    seen_affinity, built = [], []

    def make_runner(threads):
        seen_affinity.append(os.sched_getaffinity(0))
        built.append(threads)
        return lambda batch: [r.upper() for r in batch]

    streams = min(2, len(os.sched_getaffinity(0)))
    before = os.sched_getaffinity(0)
    out = run_packed(requests, [len(r) for r in requests], make_runner, BatcherConfig(token_budget=40, streams=streams))
    assert out == [r.upper() for r in requests]
    assert len(built) == streams and sum(built) <= len(os.sched_getaffinity(0))
    assert sorted(map(sorted, seen_affinity)) == sorted(map(list, core_groups(streams)))
    assert os.sched_getaffinity(0) == before  # pinning applies to the stream threads only


def test_progress_reaches_the_total_and_a_failing_batch_raises_in_the_caller():
    progress = []
    run_batches(list(range(10)), [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9]], lambda t: (lambda b: b), progress=lambda d, n: progress.append((d, n)))
    assert progress[-1] == (10, 10)

    def broken(threads):
        return lambda batch: batch[:-1]

    with pytest.raises(RuntimeError, match="gave"):
        run_batches(list(range(4)), [[0, 1], [2, 3]], broken)


def test_too_many_streams_for_the_cores_is_refused():
    with pytest.raises(ValueError, match="cores"):
        core_groups(len(os.sched_getaffinity(0)) + 1, 1)
