"""`python -m benchmarks.calibration_memory`: peak memory of calibration, ours vs ONNX Runtime's.

Both calibrate every activation of the reference ResNet-50 (32x32) with the entropy method on
100 and 1000 training images in batches of 20, each run in a fresh process whose peak RSS is
read back. ORT's histogram calibrators keep every intermediate output until the end; ours
folds each batch into fixed-size histograms. (Batches of 20 divide both counts: ORT's
histogram collector fails on a smaller last batch, "inhomogeneous shape", ORT 1.31.1.)
"""

BATCH = 20

import json
import subprocess
import sys
import textwrap

from benchmarks.results import sized, write_results
from models.resnet50.build import DEMO, TrainRecipe, build
from quantize.target import host_isa

OURS = textwrap.dedent("""
    import json, resource, sys, time
    import onnx, onnx_ir as ir
    from calibration import Entropy, choose_range, collect_histograms, open_calibration
    from quantize import passes
    from quantize.pipeline import input_specs, observed_tensors
    from quantize.policy import select_nodes
    model_path, calib_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    clean = ir.serde.serialize_model(passes.cleanup(ir.serde.deserialize_model(onnx.load(model_path))))
    graph = ir.serde.deserialize_model(clean)
    tensors = observed_tensors(graph, select_nodes(graph).int8)
    start = time.perf_counter()
    histograms = collect_histograms(clean, tensors, open_calibration(calib_path, input_specs(clean)), n, batch_size=int(sys.argv[4]))
    ranges = {name: choose_range(h, Entropy()) for name, h in histograms.items()}
    print(json.dumps({"seconds": time.perf_counter() - start, "tensors": len(ranges),
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")

ORT = textwrap.dedent("""
    import json, resource, sys, tempfile, time
    import numpy as np
    from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator
    model_path, calib_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    images = np.load(calib_path)["image"][:n]
    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"image": images[i:i + int(sys.argv[4])]} for i in range(0, n, int(sys.argv[4]))])
        def get_next(self):
            return next(self.batches, None)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        calibrator = create_calibrator(model_path, augmented_model_path=f"{tmp}/augmented.onnx", calibrate_method=CalibrationMethod.Entropy)
        calibrator.collect_data(Reader())
        ranges = calibrator.compute_data()
    print(json.dumps({"seconds": time.perf_counter() - start, "tensors": len(ranges.data),
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


def _run(script: str, model, calib, n: int) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", script, str(model), str(calib), str(n), str(BATCH)],
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise RuntimeError(run.stderr.strip().splitlines()[-1])
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    cache = build(sized(TrainRecipe(), DEMO))
    model, calib = cache / "resnet50.onnx", cache / "calib.npz"
    runs = {
        tool: {n: _run(script, model, calib, n) for n in (100, 1000)}
        for tool, script in (("quantize", OURS), ("ort_entropy", ORT))
    }
    result = {
        "machine": host_isa(),
        "model": "ResNet-50, 32x32x3",
        "method": "entropy",
        "batch": BATCH,
        "runs": runs,
        "growth_mib_100_to_1000": {
            tool: r[1000]["peak_mib"] - r[100]["peak_mib"] for tool, r in runs.items()
        },
    }
    lines = [
        f"# Calibration peak memory (ResNet-50 at 32x32, entropy, every activation, batch {BATCH})",
        "",
        "| calibrator | peak MiB, 100 samples | peak MiB, 1000 samples | growth | seconds (1000) |",
        "|---|---|---|---|---|",
    ]
    for tool, r in runs.items():
        lines.append(
            f"| {tool} | {r[100]['peak_mib']:.0f} | {r[1000]['peak_mib']:.0f} | {r[1000]['peak_mib'] - r[100]['peak_mib']:+.0f} | {r[1000]['seconds']:.1f} |"
        )
    markdown = "\n".join(lines) + "\n"
    write_results("calibration_memory", result, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
