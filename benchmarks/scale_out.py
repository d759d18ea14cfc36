"""`python -m benchmarks.scale_out`: a sharded INT8 shower production on this machine's streams
(StreamPool) and on Ray (one node, then two Ray nodes on this machine), a node killed mid-job,
and a projection to N nodes from the measured figures.

The generator is the 3DGAN architecture with the cached training's weights if there is one,
else seeded random weights (speed does not depend on them), quantized by energy range as
`python -m models.calogan quantize` does. Every configuration runs the same job (same seed,
same shards) into a fresh folder; local and Ray one-node runs alternate, REPEATS times each,
and the medians are compared. Throughput counts from the moment a pool has started (its
streams hold their sessions): a production runs for hours after a start of seconds, which is
reported beside it. Starting Ray itself is outside both (a cluster exists before a production):
the job starts once Ray has settled, SETTLE_S after `ray.init`, when the idle worker processes
Ray launches have stopped taking CPU from the streams.
"""

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.results import sized, write_results
from models.calogan.generate import energy_edges, quantize_by_energy, trained_generator
from models.calogan.production import ShowerJob
from onnxio import save_model
from quantize.batcher import StreamPool, quiet
from quantize.frontend.tensorflow import keras_to_onnx
from quantize.ray_pool import RayPool
from quantize.shards import run_job

SHOWERS, SHARD_SIZE, ENERGY, REPEATS = sized(12000, 1000), 250, (10.0, 500.0), sized(3, 1)
SETTLE_S = 10  # after a Ray start: Ray launches its idle worker processes, which take CPU
STREAMS = 2  # one per core, one thread each
OVERHEAD_BATCHES = 400
FILESYSTEM_GB_S = 1.0  # assumed shared-filesystem write bandwidth for the projection
NODES = (1, 10, 100, 1000, 10000)


def _timed_job(
    job: ShowerJob, folder: Path, make_pool, progress=quiet
) -> tuple[float, float, dict]:
    """(seconds to start the pool, showers/s once started, manifest) of one run of `job`."""
    clock = {}

    def timed_pool(make_runner):
        clock["start"] = time.perf_counter()
        pool = make_pool(make_runner)
        clock["started"] = time.perf_counter()
        return pool

    _, manifest = run_job(job.sharded(folder), job.make_writer, timed_pool, progress)
    rate = job.showers / (time.perf_counter() - clock["started"])
    return clock["started"] - clock["start"], rate, manifest


def _digests(manifest: dict) -> dict:
    return {s["file"]: s["sha256"] for s in manifest["shards"]}


def _per_batch_overhead(pool_factory) -> float:
    """Seconds a batch costs the pool with nothing to compute (one request, an echo)."""
    with pool_factory(lambda threads: lambda batch: batch) as pool:
        pool.run([0], [[0]])  # warm
        start = time.perf_counter()
        pool.run(list(range(OVERHEAD_BATCHES)), [[i] for i in range(OVERHEAD_BATCHES)])
        return (time.perf_counter() - start) / OVERHEAD_BATCHES


def _local(make_runner):
    return StreamPool(make_runner, streams=STREAMS)


def _ray(make_runner):
    return RayPool(make_runner, streams=STREAMS)


def _ray_init(ray, **options):
    """A Ray that has settled, as a production cluster has before a job arrives."""
    ray.init(**options, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    time.sleep(SETTLE_S)


def main() -> None:
    import ray
    from ray.cluster_utils import Cluster

    model, weights = trained_generator()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save_model(keras_to_onnx(model), tmp / "generator.onnx")
        quantize_by_energy(tmp / "generator.onnx", energy_edges(8), samples=512).save(tmp / "int8")
        job = ShowerJob(str(tmp / "int8"), SHOWERS, ENERGY, seed=0, shard_size=SHARD_SIZE)

        local, on_ray, starts, reference = [], [], {"local": [], "ray": []}, None
        for i in range(REPEATS):  # alternating, so drift in the machine's speed hits both
            start, rate, manifest = _timed_job(job, tmp / f"local{i}", _local)
            local.append(rate)
            starts["local"].append(start)
            reference = reference or _digests(manifest)
            _ray_init(ray, address="local", num_cpus=STREAMS)
            try:
                start, rate, manifest = _timed_job(job, tmp / f"ray{i}", _ray)
                on_ray.append(rate)
                starts["ray"].append(start)
                one_node_identical = _digests(manifest) == reference
            finally:
                ray.shutdown()
        local_overhead = _per_batch_overhead(_local)

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        second = cluster.add_node(num_cpus=1)
        _ray_init(ray, address=cluster.address)
        try:
            ray_overhead = _per_batch_overhead(_ray)
            _, two_nodes, manifest = _timed_job(job, tmp / "two_nodes", _ray)
            two_nodes_identical = _digests(manifest) == reference
            killed = []

            def kill_after_first_shard(done, total):
                if not killed:
                    cluster.remove_node(second, allow_graceful=False)
                    killed.append(done)

            _, with_kill, manifest = _timed_job(job, tmp / "kill", _ray, kill_after_first_shard)
            kill_identical = _digests(manifest) == reference and len(killed) == 1
        finally:
            ray.shutdown()
            cluster.shutdown()
        shard_bytes = statistics.median(s["bytes"] for s in manifest["shards"])

        start = time.perf_counter()
        resumed, _ = run_job(job.sharded(tmp / "kill"), job.make_writer, _ray)
        resume_seconds = time.perf_counter() - start

    local_rate, ray_rate = statistics.median(local), statistics.median(on_ray)
    result = {
        "generator_weights": weights,
        "job": {"showers": SHOWERS, "shard_size": SHARD_SIZE, "energy_gev": list(ENERGY)},
        "streams": STREAMS,
        "local_showers_per_s": local,
        "ray_one_node_showers_per_s": on_ray,
        "ray_over_local_throughput": ray_rate / local_rate,
        "pool_start_s_median": {k: statistics.median(v) for k, v in starts.items()},
        "ray_two_nodes_showers_per_s": two_nodes,
        "ray_two_nodes_one_killed_showers_per_s": with_kill,
        "ray_output_identical_to_local": one_node_identical and two_nodes_identical,
        "node_kill_output_identical": kill_identical,
        "resume_of_a_finished_job": {"shards_run": len(resumed), "seconds": resume_seconds},
        "per_batch_overhead_s": {"local": local_overhead, "ray": ray_overhead},
        "shard_bytes_median": shard_bytes,
    }
    result["projection"] = _projection(ray_rate, ray_overhead, shard_bytes)
    markdown = _markdown(result, local_rate, ray_rate)
    write_results("scale_out", result, markdown)
    print(markdown)


def _projection(node_rate: float, overhead_s: float, shard_bytes: float) -> dict:
    """Showers/s on N nodes of this machine's speed: nodes add up until the driver, which hands
    out shards one at a time at `overhead_s` each, or the shared filesystem becomes the limit."""
    driver_limit = SHARD_SIZE / overhead_s
    filesystem_limit = FILESYSTEM_GB_S * 1e9 / (shard_bytes / SHARD_SIZE)
    return {
        "node_showers_per_s": node_rate,
        "driver_limit_showers_per_s": driver_limit,
        "filesystem_limit_showers_per_s": filesystem_limit,
        "assumed_filesystem_gb_s": FILESYSTEM_GB_S,
        "showers_per_s": {n: min(n * node_rate, driver_limit, filesystem_limit) for n in NODES},
        "hours_for_1e9_showers": {
            n: 1e9 / min(n * node_rate, driver_limit, filesystem_limit) / 3600 for n in NODES
        },
    }


def _markdown(r: dict, local_rate: float, ray_rate: float) -> str:
    p = r["projection"]
    lines = [
        f"# Scale-out: {r['job']['showers']} INT8 3DGAN showers in shards of "
        f"{r['job']['shard_size']}, {r['streams']} streams x 1 core",
        "",
        "| run | showers/s | x local | output identical to local |",
        "|---|---|---|---|",
        f"| local StreamPool (median of {len(r['local_showers_per_s'])}) | {local_rate:.0f} | 1.00 | (reference) |",
        f"| Ray, one node (median of {len(r['ray_one_node_showers_per_s'])}) | {ray_rate:.0f} | "
        f"{r['ray_over_local_throughput']:.2f} | {r['ray_output_identical_to_local']} |",
        f"| Ray, two nodes on this machine | {r['ray_two_nodes_showers_per_s']:.0f} | "
        f"{r['ray_two_nodes_showers_per_s'] / local_rate:.2f} | {r['ray_output_identical_to_local']} |",
        f"| Ray, two nodes, one killed after the first shard | "
        f"{r['ray_two_nodes_one_killed_showers_per_s']:.0f} | "
        f"{r['ray_two_nodes_one_killed_showers_per_s'] / local_rate:.2f} | {r['node_kill_output_identical']} |",
        "",
        f"Showers/s count from the moment the pool has started; starting took "
        f"{r['pool_start_s_median']['local']:.1f} s for the local streams (forked: the model "
        f"code is already imported) and {r['pool_start_s_median']['ray']:.1f} s for the Ray "
        "actors (fresh processes importing it, TensorFlow included), once per job. "
        f"Rerun of the finished job: {r['resume_of_a_finished_job']['shards_run']} shards run, "
        f"{r['resume_of_a_finished_job']['seconds']:.1f} s (no pool started). Per-batch cost "
        f"with nothing to compute: local {r['per_batch_overhead_s']['local'] * 1e3:.2f} ms, "
        f"Ray {r['per_batch_overhead_s']['ray'] * 1e3:.2f} ms. Shard: "
        f"{r['shard_bytes_median'] / 1e6:.1f} MB for {r['job']['shard_size']} showers (lzf).",
        "",
        f"Projection for N nodes like this one ({p['node_showers_per_s']:.0f} showers/s each): "
        f"the driver hands out at most {p['driver_limit_showers_per_s']:.3g} showers/s (one "
        f"shard per {r['per_batch_overhead_s']['ray'] * 1e3:.2f} ms), a shared filesystem "
        f"writing {p['assumed_filesystem_gb_s']:g} GB/s (assumed) takes "
        f"{p['filesystem_limit_showers_per_s']:.3g} showers/s.",
        "",
        "| nodes | showers/s | hours for 10^9 showers |",
        "|---|---|---|",
    ]
    lines += [
        f"| {n} | {p['showers_per_s'][n]:.3g} | {p['hours_for_1e9_showers'][n]:.3g} |"
        for n in NODES
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
