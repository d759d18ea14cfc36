"""`FuseHardSwishPass`: hard-swish written out as Paddle2ONNX writes it becomes one HardSwish."""

import numpy as np
import onnx_ir as ir
import pytest
from graphs import hard_swish_net, images, ops, run, run_pass
from onnx import helper

from quantize.passes import FuseHardSwishPass


def raised_to_13(model):
    model.opset_import[0].version = 13
    return model


def test_the_four_nodes_become_one_hard_swish_under_the_divs_name_with_the_same_function():
    model = raised_to_13(hard_swish_net())
    fused = run_pass(FuseHardSwishPass(), model)
    (hard_swish,) = [n for n in fused.graph if n.op_type == "HardSwish"]
    assert hard_swish.name == "div" and hard_swish.inputs[0].name == "c"
    assert "Clip" not in ops(fused) and ops(fused).count("Div") == 1  # the Div by an activation
    assert fused.opset_imports[""] == 14
    x = images(4)
    np.testing.assert_allclose(run(fused, x), run(model, x), rtol=1e-5, atol=1e-5)


def test_a_gate_that_is_not_hard_swish_or_is_read_elsewhere_stays_written_out():
    assert "HardSwish" not in ops(run_pass(FuseHardSwishPass(), raised_to_13(hard_swish_net(5.0))))
    read_twice = raised_to_13(hard_swish_net())
    read_twice.graph.output.append(helper.make_tensor_value_info("clipped", 1, None))
    fused = run_pass(FuseHardSwishPass(), read_twice)
    assert "HardSwish" not in ops(fused) and fused.opset_imports[""] == 13


def test_a_model_before_opset_13_is_refused():
    model = hard_swish_net()
    model.opset_import[0].version = 11
    with pytest.raises(ir.passes.PassError):
        run_pass(FuseHardSwishPass(), model)
