"""`python -m models.calogan simulate | train | quantize | generate`: the 3DGAN study's commands.

simulate --showers N -o FILE.h5           showers from the detector simulator
train [--minutes M]                        train (or resume) the generator into the cache
quantize [--ranges K] [--samples N] [-o DIR]  INT8 generators, one per energy range, from the cached training
generate -o FILE.h5 [--int8 DIR]           showers from the FP32 (or INT8) generator, 3DGAN layout
generate -o DIR [--ray [ADDRESS]] ...      the same in shards with a manifest, resumable, on Ray
"""

import argparse
import os
import sys
import time
from pathlib import Path

from models.calogan.production import SHARD_SIZE
from models.calogan.showers import write_showers
from models.calogan.train import ENERGY_RANGE_GEV, TrainRecipe, train, training_folder
from onnxio import InputError
from quantize.cache import cache_dir
from quantize.ray_pool import pool_factory
from quantize.runtime import RUNTIMES
from quantize.shards import run_job
from quantize.target import TARGETS


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m models.calogan")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate", help="simulate electron showers in the CLIC ECAL into a 3DGAN-layout HDF5 file"
    )
    sim.add_argument("--showers", type=int, default=10000)
    sim.add_argument("-o", "--output", required=True)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument(
        "--energy",
        type=float,
        nargs=2,
        default=(2.0, 500.0),
        metavar=("MIN", "MAX"),
        help="GeV (default 2 500)",
    )
    fit = sub.add_parser(
        "train", help="train the 3DGAN on simulated showers; resumes from the cache"
    )
    fit.add_argument(
        "--minutes",
        type=float,
        default=float("inf"),
        help="time budget; the step reached is saved and resumed",
    )
    fit.add_argument("--epochs", type=int, default=TrainRecipe.epochs)
    fit.add_argument("--showers", type=int, default=TrainRecipe.showers)
    fit.add_argument(
        "--batch", type=int, default=TrainRecipe.batch, help="default %(default)s (published)"
    )
    q = sub.add_parser(
        "quantize",
        help="INT8 generators, one per primary-energy range, from the cached training (a range "
        "whose INT8 is not faster than FP32 on this CPU keeps FP32, with a warning)",
    )
    q.add_argument(
        "--ranges",
        type=int,
        default=8,
        help="energy ranges of equal ratio over the trained 10-500 GeV (default 8)",
    )
    q.add_argument(
        "--samples",
        type=int,
        default=4096,
        help="latents per range for calibration and the output cell correction (default 4096)",
    )
    q.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="folder (default: $QUANTIZE_CACHE/calogan/int8)",
    )
    q.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="onnxruntime",
        help="what the generators will run in: the output cells are corrected as it computes "
        "them, and `generate` runs them there (default %(default)s)",
    )
    q.add_argument(
        "--target",
        choices=("auto", *TARGETS),
        default="auto",
        help="the CPU INT8 path the generators are made for (default: this machine's); avx2 "
        "makes them exact on every x86 CPU (see `quantize --target`)",
    )
    gen = sub.add_parser(
        "generate",
        help="showers from the cached generator: one 3DGAN-layout HDF5 file (-o FILE.h5) or a "
        "folder of shards with a manifest (-o DIR), resumed when rerun",
    )
    gen.add_argument("-o", "--output", type=Path, required=True)
    gen.add_argument("--showers", type=int, default=1000)
    gen.add_argument(
        "--energy",
        "--energies",
        type=float,
        nargs=2,
        default=ENERGY_RANGE_GEV,
        metavar=("MIN", "MAX"),
        help="GeV, inside the trained {:g}-{:g} (default)".format(*ENERGY_RANGE_GEV),
    )
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument(
        "--int8", type=Path, help="a folder written by `quantize`; default: the FP32 generator"
    )
    gen.add_argument(
        "--shard-size",
        type=int,
        default=SHARD_SIZE,
        help="showers per shard (default %(default)s); a shower's inputs depend on it",
    )
    gen.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run the shards on a Ray cluster (ADDRESS, 'auto', or none: a Ray started here)",
    )
    args = parser.parse_args()
    try:
        return {
            "simulate": _simulate,
            "train": _train,
            "quantize": _quantize,
            "generate": _generate,
        }[args.command](args)
    except InputError as exc:
        print(f"python -m models.calogan: error: {exc}", file=sys.stderr)
        return 2


def _simulate(args) -> int:
    if args.showers < 1 or not 0 < args.energy[0] <= args.energy[1]:
        print(
            "python -m models.calogan: error: need --showers >= 1 and 0 < MIN <= MAX",
            file=sys.stderr,
        )
        return 2
    start = time.perf_counter()
    write_showers(args.output, args.showers, args.seed, tuple(args.energy))
    seconds = time.perf_counter() - start
    print(
        f"wrote {args.showers} showers to {args.output} in {seconds:.1f} s ({args.showers / seconds:.0f} showers/s)"
    )
    return 0


def _train(args) -> int:
    train(
        TrainRecipe(showers=args.showers, epochs=args.epochs, batch=args.batch),
        minutes=args.minutes,
    )
    return 0


def _fp32_onnx() -> Path:
    """The cached generator exported to ONNX (re-exported when the training moved on)."""
    from models.calogan.generate import trained_generator
    from onnxio import save_model
    from quantize.frontend.tensorflow import keras_to_onnx

    folder = training_folder()
    weights, path = folder / "generator.weights.h5", folder / "generator.onnx"
    if not weights.exists():
        raise InputError(
            weights, "no trained generator yet: run `python -m models.calogan train` first"
        )
    if not path.exists() or path.stat().st_mtime < weights.stat().st_mtime:
        save_model(keras_to_onnx(trained_generator()[0]), path)
    return path


def _quantize(args) -> int:
    from models.calogan.generate import energy_edges, quantize_by_energy
    from quantize.pipeline import WHOLE_FP32

    if args.ranges < 1 or args.samples < 64:
        print(
            "python -m models.calogan: error: --ranges must be at least 1 and --samples at least 64 (one batch)",
            file=sys.stderr,
        )
        return 2
    out = args.output or cache_dir("calogan") / "int8"
    models = quantize_by_energy(
        _fp32_onnx(),
        energy_edges(args.ranges),
        samples=args.samples,
        runtime=args.runtime,
        target=args.target,
        speed_check=True,
    )
    for low, high, check in zip(models.edges, models.edges[1:], models.speed_checks):
        if check.endswith(WHOLE_FP32):
            print(
                f"python -m models.calogan: warning: {low:.0f}-{high:.0f} GeV: {check}",
                file=sys.stderr,
            )
    models.save(out)
    edges = ", ".join(f"{e:.0f}" for e in models.edges)
    print(f"wrote {len(models.models)} INT8 generators to {out} (energy edges {edges} GeV)")
    return 0


def _generate(args) -> int:
    from models.calogan.production import ShowerJob

    low, high = args.energy
    if args.showers < 1 or not ENERGY_RANGE_GEV[0] <= low <= high <= ENERGY_RANGE_GEV[1]:
        print(
            f"python -m models.calogan: error: need --showers >= 1 and {ENERGY_RANGE_GEV[0]:g} <= MIN <= MAX <= "
            f"{ENERGY_RANGE_GEV[1]:g} GeV (the generator's trained range); got {low:g} {high:g}",
            file=sys.stderr,
        )
        return 2
    if args.shard_size < 1:
        print("python -m models.calogan: error: --shard-size must be at least 1", file=sys.stderr)
        return 2
    sharded = args.output.suffix != ".h5"
    if args.ray and not sharded:
        print(
            f"python -m models.calogan: error: {args.output}: --ray writes a folder of shards, not one .h5 file",
            file=sys.stderr,
        )
        return 2
    job = ShowerJob(
        str(args.int8 or _fp32_onnx()), args.showers, (low, high), args.seed, args.shard_size
    )
    kind = "INT8" if args.int8 else "FP32"
    start = time.perf_counter()
    if not sharded:
        job.write_file(args.output)
        seconds = time.perf_counter() - start
        print(
            f"wrote {args.showers} showers to {args.output} ({kind}, {args.showers / seconds:.0f} showers/s)"
        )
        return 0
    try:
        ran, manifest = run_job(
            job.sharded(args.output),
            job.make_writer,
            pool_factory(args.ray, len(os.sched_getaffinity(0))),
            _progress(),
        )
    except RuntimeError as exc:  # a shard that failed, named with its showers
        raise InputError(args.output, f"generation stopped: {exc}") from None
    seconds = time.perf_counter() - start
    shards = len(manifest["shards"])
    print(
        f"{args.output}: {shards} shards of {args.showers} showers ({kind}); {len(ran)} written "
        f"now ({sum(map(len, ran)) / seconds:.0f} showers/s), {shards - len(ran)} were already there"
    )
    return 0


def _progress():
    start = time.perf_counter()

    def report(done: int, total: int) -> None:
        print(
            f"\r{done}/{total} shards, {time.perf_counter() - start:.0f} s",
            end="\n" if done == total else "",
            file=sys.stderr,
            flush=True,
        )

    return report


if __name__ == "__main__":
    sys.exit(main())
