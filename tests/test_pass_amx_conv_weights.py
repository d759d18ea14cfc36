"""`AmxConvWeightsPass` (quantize/passes/amx_conv_weights.py): on AMX, a large Conv's int8
weights are stored one step down at zero point -1, the same values, so ONNX Runtime takes its
GEMM path (AMX tiles) instead of its symmetric VNNI kernel; the plan names which Convs."""

import dataclasses
import warnings

import numpy as np
import onnx_ir as ir
import pytest
from graphs import conv_net, images, plan_for

from quantize import Recipe, coverage, kernel_timing, passes
from quantize.passes.amx_conv_weights import stored_for_gemm
from quantize.plan import make_plan
from quantize.runtime import TargetMismatchWarning, session
from quantize.target import TARGET_KEY, WEIGHT_FORMATS, WEIGHTS_KEY


def _cleaned() -> ir.Model:
    return passes.cleanup(ir.serde.deserialize_model(conv_net(channels=64)))


def _lowered(amx_convs: set[str]) -> ir.Model:
    """conv_net lowered as for an AMX CPU: int8 weights, `amx_convs` stored for the GEMM path,
    stamped as made for amx (so that a CPU whose kernels saturate runs it on exact ones)."""
    model = _cleaned()
    plan = plan_for(model, {"conv1", "conv2", "fc"})
    int8 = dataclasses.replace(plan, weights=WEIGHT_FORMATS["int8"], amx_convs=amx_convs)
    lowered = passes.lower_to_qdq(model, int8)
    lowered.metadata_props.update({TARGET_KEY: "amx", WEIGHTS_KEY: "int8"})
    return lowered


def _weight_dequantizer(model: ir.Model, conv: str) -> ir.Node:
    return next(n for n in model.graph if n.name == conv).inputs[1].producer()


def _dequantized(dq: ir.Node) -> np.ndarray:
    q, scale, zero_point = (v.const_value.numpy().astype(np.float64) for v in dq.inputs)
    return (q - zero_point[:, None, None, None]) * scale[:, None, None, None]


def test_only_a_large_conv_with_symmetric_weights_is_timed_on_the_tiles():
    convs = {n.name: n for n in _cleaned().graph if n.op_type == "Conv"}
    int8 = WEIGHT_FORMATS["int8"]
    # conv2: 64 outputs, a reduction of 64 x 3 x 3; conv1 reduces only 3 x 3 x 3 inputs
    assert kernel_timing._tiles_candidate(convs["conv2"], int8)
    assert kernel_timing._tiles_candidate(convs["conv2"], WEIGHT_FORMATS["int7"])
    assert not kernel_timing._tiles_candidate(convs["conv1"], int8)
    assert not kernel_timing._tiles_candidate(convs["conv2"], WEIGHT_FORMATS["uint8"])


def test_the_plan_puts_convs_on_the_tiles_for_onnx_runtime_with_symmetric_weights_only():
    model = _cleaned()

    def tiles(**recipe) -> set[str]:
        resolved = Recipe(target="amx", **recipe).resolved()
        # conv1 is measured faster there but not planned INT8; no range matters here
        return make_plan(model, {"conv2"}, {}, resolved, frozenset({"conv1", "conv2"})).amx_convs

    assert tiles() == {"conv2"}
    assert tiles(runtime="openvino") == set()
    assert tiles(weights="uint8") == set()


def test_the_named_conv_reads_the_same_weights_at_zero_point_minus_one_and_computes_the_same():
    plain, tiles = _lowered(set()), _lowered({"conv2"})
    before, after = _weight_dequantizer(plain, "conv2"), _weight_dequantizer(tiles, "conv2")
    zero_point = after.inputs[2].const_value.numpy()
    assert zero_point.dtype == np.int8 and np.all(zero_point == -1)
    assert after.inputs[0].const_value.numpy().min() >= -128
    assert np.array_equal(_dequantized(before), _dequantized(after))
    untouched = _weight_dequantizer(tiles, "conv1").inputs[2].const_value.numpy()
    assert np.all(untouched == 0)

    protos = [ir.serde.serialize_model(m) for m in (plain, tiles)]
    # ORT still fuses it into its integer convolution
    kernels = [coverage.kernel_counts(coverage.optimized_graph(p))["int8"] for p in protos]
    assert kernels[0] == kernels[1] and kernels[1]["QLinearConv"] == 2
    # ORT's GEMM on AMX tiles, VNNI or (a saturating CPU: quantize's runtime) exact U8U8 kernels:
    # the same integers, the same output
    x = images(8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TargetMismatchWarning)
        outputs = [session(p).run(None, {"x": x})[0] for p in protos]
    assert np.array_equal(outputs[0], outputs[1])


def test_weights_that_are_not_symmetric_int8_are_refused():
    with pytest.raises(ValueError, match="not symmetric int8"):
        stored_for_gemm(np.array([-128, 5], np.int8), np.zeros(1, np.int8))
    with pytest.raises(ValueError, match="not symmetric int8"):
        stored_for_gemm(np.array([3, 5], np.int8), np.ones(1, np.int8))
    q, zero_point = stored_for_gemm(np.array([-127, 0, 127], np.int8), np.zeros(1, np.int8))
    assert q.tolist() == [-128, -1, 126] and zero_point.tolist() == [-1]
