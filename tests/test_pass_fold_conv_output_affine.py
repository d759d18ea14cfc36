"""`FoldConvOutputAffinePass` (quantize/passes/fold_conv_output_affine.py): a Conv's learnable
scale and bias after it go into its weights and bias, on a PP-LCNetV3 block."""

import numpy as np
from graphs import images, lcnet_block, run, run_pass

from quantize.passes import FoldConvOutputAffinePass


def test_a_scale_and_shift_after_a_conv_fold_into_its_weights_and_bias():
    folded = run_pass(FoldConvOutputAffinePass(), lcnet_block())
    names = [n.name for n in folded.graph]
    assert not {"scale1", "shift1", "scale2", "shift2"} & set(names)
    x = images(4)
    np.testing.assert_allclose(run(folded, x), run(lcnet_block(), x), rtol=1e-4, atol=1e-5)


def test_a_conv_whose_output_has_another_reader_keeps_its_scale():
    folded = run_pass(FoldConvOutputAffinePass(), lcnet_block(extra_reader=True))
    names = [n.name for n in folded.graph]
    assert "scale2" in names and "shift1" not in names
