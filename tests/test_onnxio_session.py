"""`onnxio.cpu_session`: the graph optimisations it leaves out, and why they cost nothing."""

import tempfile
from pathlib import Path

import numpy as np
import onnx

from benchmarks.ort_fusions import skip_layernorm
from onnxio import cpu_session


def test_a_residual_add_and_layernorm_stay_unfused_and_compute_what_the_fused_kernel_does():
    rng = np.random.default_rng(0)
    feeds = {n: rng.normal(size=(16, 31, 384)).astype(np.float32) for n in ("x", "skip")}
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        unfused = cpu_session(skip_layernorm(384, fused=False), optimized_path=optimized)
        kernels = [n.op_type for n in onnx.load(optimized).graph.node]
    assert kernels == ["Add", "LayerNormalization"]
    fused = cpu_session(skip_layernorm(384, fused=True))
    np.testing.assert_allclose(
        unfused.run(None, feeds)[0], fused.run(None, feeds)[0], rtol=1e-5, atol=1e-5
    )
