"""The 3DGAN generator: the published shapes, and an INT8 model whose convolutions all run as
ONNX Runtime's 2D integer kernels (its 3D INT8 path is slower than FP32)."""

import keras
import numpy as np
import onnx
import onnx_ir as ir

from models.calogan import LATENT  # noqa: E402
from models.calogan.network import discriminator, generator  # noqa: E402
from quantize import Recipe, RunOptions, quantize  # noqa: E402
from quantize.frontend.tensorflow import keras_to_onnx  # noqa: E402
from quantize.runtime import session  # noqa: E402
from quantize.target import host_target  # noqa: E402


def test_published_architecture_shapes():
    keras.utils.set_random_seed(0)
    g, d = generator(), discriminator()
    assert g.output_shape == (None, 25, 25, 25, 1)
    assert [layer.kernel_size for layer in g.layers if isinstance(layer, keras.layers.Conv3D)] == [
        (6, 6, 8),
        (6, 5, 8),
        (3, 3, 8),
        (2, 2, 2),
    ]
    assert [o[1:] for o in d.output_shape] == [(1,), (1,), (1,)]
    showers = g(np.ones((2, LATENT), np.float32)).numpy()
    np.testing.assert_allclose(
        d(showers)[2].numpy()[:, 0], showers.sum(axis=(1, 2, 3, 4)), rtol=1e-5
    )


def test_int8_generator_runs_every_conv_as_a_2d_integer_kernel(tmp_path):
    keras.utils.set_random_seed(0)
    model = generator()
    onnx.save(keras_to_onnx(model), str(tmp_path / "g.onnx"))
    rng = np.random.default_rng(0)
    latents = (rng.normal(size=(96, LATENT)) * rng.uniform(0.1, 5, (96, 1))).astype(np.float32)
    np.save(tmp_path / "latents.npy", latents)
    result = quantize(
        tmp_path / "g.onnx",
        tmp_path / "latents.npy",
        Recipe(kernel_timing=False),
        RunOptions(calib_samples=64),
    )
    assert result.kernels["int8"]["QLinearConv"] == 4 and "Conv" not in result.kernels["float"]
    weights = [i for i in result.model.graph.initializer if i.name.endswith("weight_quantized")]
    assert sorted(len(w.dims) for w in weights if len(w.dims) > 2) == [
        4,
        4,
        4,
        4,
    ]  # 2D convolutions
    x = latents[64:72]
    expected = model(x, training=False).numpy()
    got = session(result.model).run(None, {"latent": x})[0]
    assert got.shape == expected.shape
    assert np.sum((expected - got) ** 2) < 0.05 * np.sum(
        expected**2
    )  # SQNR above 13 dB on random weights


def test_a_generator_made_for_vnni_runs_on_the_exact_kernels_a_saturating_cpu_needs(tmp_path):
    """Its widened and residual Convs each read the weights of the Conv they refine; ORT's
    conversion of int8 weights to uint8 for exact kernels failed on weights two Convs share."""
    keras.utils.set_random_seed(0)
    model = generator()
    onnx.save(keras_to_onnx(model), str(tmp_path / "g.onnx"))
    rng = np.random.default_rng(0)
    latents = (rng.normal(size=(72, LATENT)) * rng.uniform(0.1, 5, (72, 1))).astype(np.float32)
    np.save(tmp_path / "latents.npy", latents[:64])
    recipe = Recipe.generator(
        ir.load(tmp_path / "g.onnx"), target="vnni", kernel_timing=False, bias_correction=False
    )
    int8 = quantize(tmp_path / "g.onnx", tmp_path / "latents.npy", recipe).model
    x = {"latent": latents[64:]}
    exact = session(int8, exact_kernels=True).run(None, x)[0]
    expected = model(x["latent"], training=False).numpy()
    assert np.sum((expected - exact) ** 2) < 0.05 * np.sum(expected**2)
    if host_target() != "avx2":  # where the default kernels do not saturate, they are exact too
        np.testing.assert_allclose(session(int8).run(None, x)[0], exact, rtol=1e-5, atol=1e-6)
