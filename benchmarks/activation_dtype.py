"""`python -m benchmarks.activation_dtype`: uint8 vs int8 activations (U8S8 vs S8S8) on this CPU.

The same ResNet-50, quantized by ONNX Runtime's quantize_static twice (only the activation
type differs), timed in one run at 224x224, batch 32, 2 threads. Decides which form the Q/DQ
passes emit.
"""

import numpy as np
import onnx

from benchmarks.results import sized, write_results
from benchmarks.rivals import ort_quantize_static
from models.resnet50.build import DEMO, TrainRecipe, build
from quantize.bench import compare_sessions
from quantize.coverage import kernel_counts, optimized_graph
from quantize.target import host_isa


def main() -> None:
    cache = build(sized(TrainRecipe(), DEMO))
    fp32 = onnx.load(str(cache / "resnet50.onnx"))
    calib = {"image": np.load(cache / "calib.npz")["image"][:256]}
    models = {
        dtype: ort_quantize_static(fp32, calib, activations=dtype) for dtype in ("uint8", "int8")
    }
    x = np.random.default_rng(0).normal(size=(32, 224, 224, 3)).astype(np.float32)
    speed = compare_sessions(models, {"image": x}, threads=2, min_seconds=sized(8.0, 0.5))
    result = {
        "machine": host_isa(),
        "threads": 2,
        "batch": 32,
        "input": "224x224x3",
        "throughput": {dtype: s["throughput"] for dtype, s in speed.items()},
        "int8_over_uint8": speed["int8"]["throughput"] / speed["uint8"]["throughput"],
        "speed": speed,
        "ort_kernels": {dtype: kernel_counts(optimized_graph(m)) for dtype, m in models.items()},
    }
    markdown = "\n".join(
        [
            f"# Activation type on {result['machine']['cpu']} ({result['machine']['int8_gemm_path']}, ORT {result['machine']['onnxruntime']})",
            "",
            "| activations | img/s (ResNet-50, 224x224, batch 32, 2 threads) |",
            "|---|---|",
            *[f"| {dtype} | {t:.1f} |" for dtype, t in result["throughput"].items()],
            "",
            f"int8 / uint8: {result['int8_over_uint8']:.2f}x",
            "",
        ]
    )
    write_results("activation_dtype", result, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
