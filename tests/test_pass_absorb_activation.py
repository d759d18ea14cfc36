"""`AbsorbActivationPass` (quantize/passes/absorb_activation.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import conv_net, plan_for

from quantize import passes


def test_relu_after_a_quantized_op_is_absorbed_into_a_zero_point_of_zero():
    model = passes.cleanup(ir.serde.deserialize_model(conv_net(batchnorm=False)))
    plan = plan_for(model, {"conv1"})
    plan.ranges["c1"] = (0.0, plan.ranges["r1"][1])
    plan.absorbed = {"relu1": "c1"}
    q = passes.lower_to_qdq(model, plan)
    assert "relu1" not in {n.name for n in q.graph}
    zero_point = q.graph.initializers["c1_zero_point"].const_value.numpy()
    assert zero_point == 0 and zero_point.dtype == np.uint8
