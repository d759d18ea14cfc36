"""Sharded, resumable jobs on a Ray cluster: results in input order, a failing batch named, a
node killed mid-job losing nothing, and the shards identical to the single-machine output."""

import json
import os
import time

import numpy as np
import onnx
import pytest
import ray
from onnx import TensorProto, helper, numpy_helper

from models.calogan.production import ShowerJob
from onnxio import InputError
from physics_metrics.showerfile import open_showers
from quantize.shards import ShardedJob, plan_shards, run_job


def _toy_generator(path) -> str:
    """Latent (N, 200) -> ReLU(latent @ W) as (N, 25, 25, 25, 1): the 3DGAN's interface."""
    w = np.random.default_rng(0).normal(size=(200, 25**3)).astype(np.float32) / 10
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["latent", "w"], ["m"]),
            helper.make_node("Relu", ["m"], ["r"]),
            helper.make_node("Reshape", ["r", "shape"], ["cells"]),
        ],
        "toy",
        [helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["N", 200])],
        [helper.make_tensor_value_info("cells", TensorProto.FLOAT, ["N", 25, 25, 25, 1])],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(np.array([-1, 25, 25, 25, 1], np.int64), "shape"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    return _toy_generator(tmp_path_factory.mktemp("model") / "generator.onnx")


@pytest.fixture
def local_ray():
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    yield ray
    ray.shutdown()


def _single_process(job: ShowerJob, folder) -> dict:
    """The job's shards written here, one after another, with no pool: the reference output."""
    sharded = job.sharded(folder)
    sharded.runner(job.make_writer)(1)(sharded.open())
    return {s["file"]: s["sha256"] for s in sharded.finish()["shards"]}


def test_shards_cover_the_items_once_in_fixed_sizes():
    shards = plan_shards(2500, 1000)
    assert [(s.first, s.stop) for s in shards] == [(0, 1000), (1000, 2000), (2000, 2500)]
    with pytest.raises(ValueError):
        plan_shards(0, 10)


def test_a_rerun_skips_finished_shards_and_another_job_in_the_folder_is_refused(tmp_path):
    written = []

    def make_writer(threads):
        def write(shard, path):
            written.append(shard.index)
            path.write_text(f"{shard.first}-{shard.stop}")

        return write

    class InProcess:  # the pool contract, run here
        def __init__(self, make_runner):
            self.run_batch = make_runner(1)

        def run(self, requests, batches, progress):
            return [out for b in batches for out in self.run_batch([requests[i] for i in b])]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    job = ShardedJob(tmp_path / "out", {"what": "text"}, items=25, shard_size=10, suffix=".txt")
    job.path(job.shards[1]).parent.mkdir()
    job.path(job.shards[1]).write_text("10-20")  # a shard finished by a run that was killed
    partial = job.folder / f".{job.path(job.shards[2]).name}.x1y2.tmp"  # one it was writing
    partial.write_text("20-2")
    ran, manifest = run_job(job, make_writer, InProcess)
    assert not partial.exists()
    assert [s.index for s in ran] == written == [0, 2]
    assert [s["file"] for s in manifest["shards"]] == [
        "shard-0000000000-0000000010.txt",
        "shard-0000000010-0000000020.txt",
        "shard-0000000020-0000000025.txt",
    ]
    mtimes = [p.stat().st_mtime_ns for p in sorted((tmp_path / "out").glob("shard-*"))]
    ran, again = run_job(job, make_writer, InProcess)
    assert ran == [] and written == [0, 2] and again == manifest
    assert [p.stat().st_mtime_ns for p in sorted((tmp_path / "out").glob("shard-*"))] == mtimes
    other = ShardedJob(tmp_path / "out", {"what": "text"}, items=30, shard_size=10, suffix=".txt")
    with pytest.raises(InputError, match="job.json: this folder holds another job .*items"):
        other.open()


def test_one_file_holds_exactly_the_union_of_the_shards(tmp_path, generator):
    job = ShowerJob(generator, showers=70, energy=(20.0, 200.0), seed=3, shard_size=32)
    whole = open_showers(job.write_file(tmp_path / "all.h5"))
    _single_process(job, tmp_path / "shards")
    parts = [open_showers(p) for p in sorted((tmp_path / "shards").glob("showers-*.h5"))]
    assert [len(p) for p in parts] == [32, 32, 6]
    np.testing.assert_array_equal(np.concatenate([p.energies for p in parts]), whole.energies)
    np.testing.assert_array_equal(np.concatenate([p.ecal[:] for p in parts]), whole.ecal[:])
    assert np.all((whole.energies >= 20) & (whole.energies <= 200)) and whole.ecal[:].sum() > 0


def test_ray_pool_keeps_input_order_and_names_a_failing_batch(local_ray):
    from quantize.ray_pool import RayPool

    def make_runner(threads):
        def run(batch):
            if "bad" in batch:
                raise ValueError("cannot take 'bad'")
            return [(r * 2, threads, tuple(sorted(os.sched_getaffinity(0)))) for r in batch]

        return run

    requests = list(range(50))
    batches = [list(range(i, 50, 7)) for i in range(7)]
    with RayPool(make_runner, streams=2) as pool:
        out = pool.run(requests, batches)
        assert [o[0] for o in out] == [2 * r for r in requests]
        pinned = {o[2] for o in out}
        assert all(len(cores) == 1 for cores in pinned)  # each stream on its own core
        assert len(pinned) == min(2, len(os.sched_getaffinity(0)))
        with pytest.raises(RuntimeError, match=r"batch 1 \(requests 2, 3\) failed: .*'bad'"):
            pool.run([0, 1, 2, "bad"], [[0, 1], [2, 3]])
    with pytest.raises(ValueError, match="need more than the 2 CPUs of this Ray cluster"):
        RayPool(make_runner, streams=3)


def test_a_node_killed_mid_job_loses_nothing_and_the_shards_match_one_process(tmp_path, generator):
    from ray.cluster_utils import Cluster

    from quantize.ray_pool import RayPool

    job = ShowerJob(generator, showers=24, energy=(20.0, 200.0), seed=1, shard_size=2)
    reference = _single_process(job, tmp_path / "reference")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    doomed = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    try:
        killed = []

        def kill_after_the_first_shard(done, total):
            if not killed:
                cluster.remove_node(doomed, allow_graceful=False)
                killed.append(done)

        def slow_writer(threads):
            write = job.make_writer(threads)

            def slowly(shard, path):
                time.sleep(0.3)  # every node still has shards in flight when one dies
                write(shard, path)

            return slowly

        pools = []

        def pool_factory(make_runner):
            pools.append(RayPool(make_runner, streams=2))
            return pools[-1]

        ran, manifest = run_job(
            job.sharded(tmp_path / "ray"), slow_writer, pool_factory, kill_after_the_first_shard
        )
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert killed and len(ran) == 12 and pools[0].streams_lost == 1
    assert {s["file"]: s["sha256"] for s in manifest["shards"]} == reference
    assert json.loads((tmp_path / "ray" / "manifest.json").read_text()) == manifest


def test_a_failing_shard_is_named_with_its_items_and_leaves_no_file(tmp_path):
    job = ShardedJob(tmp_path, {"what": "text"}, items=30, shard_size=10, suffix=".txt")

    def make_writer(threads):
        def write(shard, path):
            path.write_text("partial")
            if shard.index == 1:
                raise ValueError("line 14 is not a sentence")

        return write

    run = job.runner(make_writer)(1)
    with pytest.raises(RuntimeError, match=r"shard-0000000010-0000000020.txt \(items 10 to 19\)"):
        run(job.open())
    assert [p.name for p in tmp_path.glob("shard-*")] == ["shard-0000000000-0000000010.txt"]
