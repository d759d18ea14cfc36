"""The coverage check reads the graph ONNX Runtime will execute."""

from onnx import helper


def test_a_planned_node_that_ort_fused_and_renamed_is_still_found_in_float():
    from quantize.coverage import float_islands

    nodes = [
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
        helper.make_node("Gemm", ["d", "w", "r"], ["y"], name="proj/MatMulAddFusion"),
    ]
    graph = helper.make_graph(nodes, "g", [], [])
    assert float_islands(graph, {"proj"}) == {"proj"}
    assert float_islands(graph, {"other"}) == set()
