"""`python -m benchmarks.zoo [--only TEXT]`: the zoo (run.py) on every model; writes
benchmarks/results/zoo_TARGET.{json,md} (TARGET: this CPU's INT8 path, avx2, vnni or amx).
--only prints only."""

import argparse
import json

from benchmarks.results import for_this_cpu, sized, write_results
from benchmarks.zoo.run import FULL, REDUCED, all_models, run_model, table

TITLE = "# Model zoo: `quantize MODEL --calib DATA` with the CLI's defaults"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__)
    parser.add_argument("--only", help="models whose name contains this text; print only")
    args = parser.parse_args(argv)
    models = [m for m in all_models() if not args.only or args.only.lower() in m.name.lower()]
    records = []
    for model in models:
        records.append(run_model(model, **sized(FULL, REDUCED)))
        print(json.dumps(records[-1], default=float), flush=True)
    if args.only:
        print(table(records))
    else:
        write_results(for_this_cpu("zoo"), {"models": records}, f"{TITLE}\n\n{table(records)}")


if __name__ == "__main__":
    main()
