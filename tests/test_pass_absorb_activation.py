"""`AbsorbActivationPass` (quantize/passes/absorb_activation.py) on small hand-built graphs."""

import numpy as np
import onnx
import onnx_ir as ir
from graphs import conv_net, hard_swish_net, images, ops, plan_for

from quantize import Recipe, passes, quantize


def test_relu_after_a_quantized_op_is_absorbed_into_a_zero_point_of_zero():
    model = passes.cleanup(ir.serde.deserialize_model(conv_net(batchnorm=False)))
    plan = plan_for(model, {"conv1"})
    plan.ranges["c1"] = (0.0, plan.ranges["r1"][1])
    plan.absorbed = {"relu1": "c1"}
    q = passes.lower_to_qdq(model, plan)
    assert "relu1" not in {n.name for n in q.graph}
    zero_point = q.graph.initializers["c1_zero_point"].const_value.numpy()
    assert zero_point == 0 and zero_point.dtype == np.uint8


def test_a_clip_from_zero_is_the_uint8_clamp_of_the_add_before_it(tmp_path):
    onnx.save(hard_swish_net(divisor=5.0), str(tmp_path / "block.onnx"))  # / 5: not fused
    np.save(tmp_path / "x.npy", images(96))
    result = quantize(tmp_path / "block.onnx", tmp_path / "x.npy", Recipe(kernel_timing=False))
    decisions = {d.name: (d.precision, d.reason) for d in result.decisions}
    assert decisions["clip"] == ("int8", "folded into the uint8 clamp")
    assert "Clip" not in ops(ir.serde.deserialize_model(result.model))
    assert result.kernels["boundary"].get("QuantizeLinear", 0) <= 1  # the input's only
    assert min(result.output_sqnr_db.values()) > 20
