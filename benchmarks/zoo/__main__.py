"""`python -m benchmarks.zoo [--quick] [--only TEXT]`: the zoo (run.py) on every model; writes
benchmarks/results/zoo.{json,md}. --quick (a few samples, no timing) and --only print only."""

import argparse
import json

from benchmarks.results import write_results
from benchmarks.zoo.run import FULL, QUICK, all_models, run_model, table

TITLE = "# Model zoo: `quantize MODEL --calib DATA` with the CLI's defaults"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few samples, no timing; print only")
    parser.add_argument("--only", help="models whose name contains this text")
    args = parser.parse_args(argv)
    models = [m for m in all_models() if not args.only or args.only.lower() in m.name.lower()]
    records = []
    for model in models:
        records.append(run_model(model, **(QUICK if args.quick else FULL)))
        print(json.dumps(records[-1], default=float), flush=True)
    if args.quick or args.only:
        print(table(records))
    else:
        write_results("zoo", {"models": records}, f"{TITLE}\n\n{table(records)}")


if __name__ == "__main__":
    main()
