"""`onnxio.cpu_session`: the graph optimisations it leaves out, and why they cost nothing;
`onnxio.computing_only`: a graph cut down to what fetched tensors need."""

import tempfile
from pathlib import Path

import numpy as np
import onnx

from benchmarks.ort_fusions import skip_layernorm
from onnxio import computing_only, cpu_session


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


def _branching_model(loop: bool = False) -> onnx.ModelProto:
    """x -> Relu -> "early"; "early" -> MatMul(W) -> "late" (the output); with `loop`, the MatMul
    sits in a Loop's body, as a subgraph reading W from the outer graph."""
    h, f = onnx.helper, onnx.TensorProto.FLOAT
    weight = onnx.numpy_helper.from_array(np.eye(4, dtype=np.float32) * 2, "W")
    matmul = h.make_node("MatMul", ["early", "W"], ["late"])
    if loop:
        body = h.make_graph(
            [
                h.make_node("Identity", ["cond"], ["cond_out"]),
                h.make_node("MatMul", ["early", "W"], ["y"]),
            ],
            "body",
            [
                h.make_tensor_value_info(n, t, s)
                for n, t, s in (
                    ("i", onnx.TensorProto.INT64, []),
                    ("cond", onnx.TensorProto.BOOL, []),
                )
            ],
            [
                h.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
                h.make_tensor_value_info("y", f, None),
            ],
        )
        trips = onnx.numpy_helper.from_array(np.array(1, np.int64), "trips")
        matmul = h.make_node("Loop", ["trips", ""], ["late"], body=body)
        weight = [weight, trips]
    graph = h.make_graph(
        [h.make_node("Relu", ["x"], ["early"]), matmul],
        "g",
        [h.make_tensor_value_info("x", f, [2, 4])],
        [h.make_tensor_value_info("late", f, None)],
        weight if loop else [weight],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_graph_cut_to_what_a_fetch_needs_computes_the_same_and_keeps_no_other_node():
    model = _branching_model()
    x = {"x": np.array([[-1, 2, -3, 4]] * 2, np.float32)}
    cut = computing_only(model, ["early"])
    assert [n.op_type for n in cut.graph.node] == ["Relu"] and not cut.graph.initializer
    assert [o.name for o in cut.graph.output] == ["early"]
    np.testing.assert_array_equal(cpu_session(cut).run(None, x)[0], np.maximum(x["x"], 0))
    whole = computing_only(model, ["late", "early", "late"])
    assert len(whole.graph.node) == 2 and [o.name for o in whole.graph.output] == ["late", "early"]
    np.testing.assert_array_equal(cpu_session(whole).run(None, x)[0], 2 * np.maximum(x["x"], 0))


def test_a_graph_with_a_subgraph_keeps_every_node_and_adds_the_fetches_to_its_outputs():
    model = _branching_model(loop=True)
    cut = computing_only(model, ["early"])
    assert [n.op_type for n in cut.graph.node] == ["Relu", "Loop"]
    assert [o.name for o in cut.graph.output] == ["late", "early"]
