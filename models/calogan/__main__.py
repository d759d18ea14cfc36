"""`python -m models.calogan simulate --showers N -o FILE.h5` | `train [--minutes M]`."""

import argparse
import sys
import time

from models.calogan.showers import write_showers
from models.calogan.train import TrainRecipe, train


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m models.calogan")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="simulate electron showers in the CLIC ECAL into a 3DGAN-layout HDF5 file")
    sim.add_argument("--showers", type=int, default=10000)
    sim.add_argument("-o", "--output", required=True)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--energy", type=float, nargs=2, default=(2.0, 500.0), metavar=("MIN", "MAX"), help="GeV (default 2 500)")
    fit = sub.add_parser("train", help="train the 3DGAN on simulated showers; resumes from the cache")
    fit.add_argument("--minutes", type=float, default=float("inf"), help="time budget; the step reached is saved and resumed")
    fit.add_argument("--epochs", type=int, default=TrainRecipe.epochs)
    fit.add_argument("--showers", type=int, default=TrainRecipe.showers)
    fit.add_argument("--batch", type=int, default=TrainRecipe.batch, help="default %(default)s (published)")
    args = parser.parse_args()
    if args.command == "train":
        train(TrainRecipe(showers=args.showers, epochs=args.epochs, batch=args.batch), minutes=args.minutes)
        return 0
    if args.showers < 1 or not 0 < args.energy[0] <= args.energy[1]:
        print("python -m models.calogan: error: need --showers >= 1 and 0 < MIN <= MAX", file=sys.stderr)
        return 2
    start = time.perf_counter()
    write_showers(args.output, args.showers, args.seed, tuple(args.energy))
    seconds = time.perf_counter() - start
    print(f"wrote {args.showers} showers to {args.output} in {seconds:.1f} s ({args.showers / seconds:.0f} showers/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
