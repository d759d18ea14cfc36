"""`HardSwishToQLinearPass`: a planned HardSwish runs as ONNX Runtime's QLinearAdd and
QLinearMul, and computes hard-swish to the rounding of its uint8 gate."""

import numpy as np
import onnx
import onnx_ir as ir
from graphs import hard_swish_net, images, ops, plan_for, run

from quantize import Recipe, passes, quantize
from quantize.coverage import optimized_graph


def test_the_lowered_hard_swish_is_the_function_to_a_gate_step():
    cleaned = passes.cleanup(ir.serde.deserialize_model(hard_swish_net()))
    plan = plan_for(cleaned, {"div"})  # the HardSwish alone, its input and output uint8
    x = images(8)
    reference = run(cleaned, x)
    lowered = passes.lower_to_qdq(cleaned, plan)  # in place
    assert "HardSwish" not in ops(lowered) and ops(lowered).count("Mul") == 1
    c_range, y_range = plan.ranges["c"], plan.ranges["hs"]
    step = max(abs(v) for v in c_range) / 255 + (y_range[1] - y_range[0]) / 255
    error = np.abs(run(lowered, x) - reference)
    assert error.max() < 8 * step  # the Conv and Sigmoid after it pass the error on
    assert error.max() > 0  # it is really quantized


def test_between_integer_convolutions_onnx_runtime_runs_it_on_uint8(tmp_path):
    onnx.save(hard_swish_net(), str(tmp_path / "hs.onnx"))
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "hs.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    assert {d.name: d.precision for d in result.decisions}["div"] == "int8"
    executed = {n.op_type for n in optimized_graph(result.model).node}
    assert {"QLinearAdd", "QLinearMul"} <= executed
    assert not executed & {"HardSwish", "HardSigmoid", "Clip"}
    assert min(result.output_sqnr_db.values()) > 20
