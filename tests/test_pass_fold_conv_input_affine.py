"""`FoldConvInputAffinePass` (quantize/passes/fold_conv_input_affine.py): the scale and shift
before Convs go into them, the shift only where they do not pad, on a PP-LCNetV3 block."""

import numpy as np
import onnx_ir as ir
from graphs import images, lcnet_block, run, run_pass

from quantize.passes import FoldConvInputAffinePass, FoldScalingPass


def test_a_shift_before_a_padded_conv_stays_as_one_add_and_folds_into_an_unpadded_one():
    model = run_pass(FoldScalingPass(), lcnet_block())
    folded = run_pass(FoldConvInputAffinePass(), ir.serde.serialize_model(model))
    names = [n.name for n in folded.graph]
    assert "scale_act" not in names and "shift_act" not in names
    (shift,) = [n for n in folded.graph if n.name == "shift_act_shift"]
    assert shift.inputs[1].const_value.numpy().shape == (1,)  # a scalar: b2 / a for each channel
    np.testing.assert_allclose(shift.inputs[1].const_value.numpy(), [-0.3 / (0.9 / 6)], rtol=1e-6)
    assert "shift2" not in names and "scale2" not in names  # into the 1x1 pointwise Conv
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(lcnet_block(), x), rtol=1e-4, atol=1e-4)
