"""`python -m physics_metrics REFERENCE.h5 GENERATED.h5 [--json OUT.json]`."""

import argparse
import json
import sys

from onnxio import InputError, write_text
from physics_metrics import compare, open_showers
from physics_metrics.compare import DEFAULT_BINS_GEV, HALF_WIDTH_GEV


def main() -> int:
    p = argparse.ArgumentParser(
        prog="python -m physics_metrics",
        description="Compare two calorimeter shower files per energy bin.",
    )
    p.add_argument("reference")
    p.add_argument("generated")
    p.add_argument(
        "--bins", type=float, nargs="+", default=DEFAULT_BINS_GEV, help="bin centres in GeV"
    )
    p.add_argument(
        "--half-width", type=float, default=HALF_WIDTH_GEV, help="GeV (default %(default)s)"
    )
    p.add_argument("--json", help="write every figure to this file")
    args = p.parse_args()
    try:
        result = compare(
            open_showers(args.reference), open_showers(args.generated), args.bins, args.half_width
        )
    except InputError as exc:
        print(f"physics_metrics: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{'Ep GeV':>7} {'n ref':>6} {'n gen':>6} {'SF shift':>9} {'max S':>6}  {'worst feature':24} {'max S, N->inf':>13}"
    )
    for row in result.bins:
        worst = max(row["separation"], key=row["separation"].get)
        print(
            f"{row['energy_gev']:7.0f} {row['showers_reference']:6d} {row['showers_generated']:6d} "
            f"{100 * row['sampling_fraction_shift']:8.2f}% {row['separation'][worst]:6.3f}  {worst:24} "
            f"{max(row['separation_infinite_n'].values()):13.3f}"
        )
    print(f"3DGAN combined metric: {result.combined_3dgan:.4f}")
    if args.json:
        write_text(args.json, json.dumps(result.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
