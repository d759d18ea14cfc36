"""`python -m benchmarks.calogan_targets_child SPEC.json`: showers of each INT8 generator set in
SPEC for SPEC's latents, written as 3DGAN-layout files, and this CPU's INT8 path as JSON on
stdout. benchmarks.calogan_targets runs it under AVX2 emulation."""

import json
import sys
from pathlib import Path

import numpy as np

from models.calogan.generate import EnergyRangeModels
from physics_metrics.showerfile import write_shower_file
from quantize.target import host_isa


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    inputs = np.load(spec["latents"])
    z, energies = inputs["latents"], inputs["energies"]
    for name, run in spec["runs"].items():
        source = EnergyRangeModels.load(Path(run["folder"])).source(
            exact_kernels=run["exact_kernels"]
        )
        write_shower_file(Path(spec["out"]) / f"{name}.h5", source(z, energies), energies)
        print(f"{name}: {len(z)} showers", file=sys.stderr, flush=True)
    print(json.dumps({"isa": host_isa()}))


if __name__ == "__main__":
    main()
