"""`FoldScalingPass` (quantize/passes/fold_scaling.py): hard-swish's / 6 and the learnable
scale after it become one Mul, on a PP-LCNetV3 block as Paddle2ONNX writes it."""

import numpy as np
from graphs import images, lcnet_block, run, run_pass

from quantize.passes import FoldScalingPass


def test_a_scaling_of_a_scaling_is_one_mul():
    folded = run_pass(FoldScalingPass(), lcnet_block())
    (mul,) = [n for n in folded.graph if n.name == "scale_act"]
    assert "div6" not in [n.name for n in folded.graph]
    np.testing.assert_allclose(mul.inputs[1].const_value.numpy(), [0.9 / 6], rtol=1e-6)
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(lcnet_block(), x), rtol=1e-5, atol=1e-6)
