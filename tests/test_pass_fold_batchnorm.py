"""`FoldBatchNormPass` (quantize/passes/fold_batchnorm.py) on small hand-built graphs."""

import numpy as np
import onnx_ir as ir
from graphs import conv_net, images, ops, run

from quantize import passes


def test_batchnorm_folds_into_conv_with_the_same_outputs():
    original = conv_net()
    model = ir.serde.deserialize_model(original)
    result = passes.FoldBatchNormPass()(model)
    assert result.modified and "BatchNormalization" not in ops(result.model)
    x = images(4)
    np.testing.assert_allclose(run(result.model, x), run(original, x), rtol=1e-4, atol=1e-5)
