"""Keras 3 .keras / .h5 files and SavedModel directories quantize like .onnx files."""

import subprocess
import sys

import keras
import numpy as np
import onnx_ir as ir  # noqa: E402
import pytest

from onnxio import InputError  # noqa: E402
from quantize import Recipe, RunOptions, passes, quantize  # noqa: E402
from quantize.frontend import load_model  # noqa: E402
from quantize.frontend.tensorflow import keras_to_onnx  # noqa: E402
from quantize.runtime import session  # noqa: E402


def small_cnn():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12, 12, 3), name="pixels")
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(4)(x))


@pytest.fixture(scope="module")
def cnn():
    return small_cnn()


@pytest.fixture
def calib(tmp_path):
    path = tmp_path / "calib.npz"
    np.savez(path, pixels=np.random.default_rng(0).normal(size=(40, 12, 12, 3)).astype(np.float32))
    return path


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_keras_files_quantize_and_match_keras(cnn, tmp_path, calib, suffix):
    path = tmp_path / f"model{suffix}"
    cnn.save(path)
    result = quantize(path, calib, Recipe(kernel_timing=False), RunOptions(calib_samples=30))
    x = np.load(calib)["pixels"][:5]
    expected = cnn(x, training=False).numpy()
    fp32 = session(result.fp32_model).run(None, {"pixels": x})[0]
    int8 = session(result.model).run(None, {"pixels": x})[0]
    np.testing.assert_allclose(fp32, expected, rtol=1e-4, atol=1e-4)
    assert np.abs(int8 - expected).max() < 0.05 * np.abs(expected).max()
    assert "QLinearConv" in result.kernels["int8"]


def test_saved_model_directory(cnn, tmp_path, calib):
    cnn.export(str(tmp_path / "saved"), verbose=False)
    model = load_model(tmp_path / "saved")
    assert [i.name for i in model.graph.inputs] == ["pixels"]
    result = quantize(
        tmp_path / "saved", calib, Recipe(kernel_timing=False), RunOptions(calib_samples=30)
    )
    assert min(result.output_sqnr_db.values()) > 20


def test_keras_file_with_code_is_refused_in_safe_mode(tmp_path):
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: t * 2)(inputs))
    model.save(tmp_path / "lambda.keras")
    with pytest.raises(InputError, match="lambda.keras: not a loadable Keras model"):
        load_model(tmp_path / "lambda.keras")


def test_directory_without_saved_model_is_a_clean_error(tmp_path):
    (tmp_path / "empty_dir").mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "quantize", str(tmp_path / "empty_dir"), "--calib", "x.npy"],
        capture_output=True,
        text=True,
    )
    assert (
        run.returncode == 2
        and "has no saved_model.pb" in run.stderr
        and "Traceback" not in run.stderr
    )


@pytest.mark.parametrize(
    "shape,beta", [((16,), 1.0), ((5, 16), 1.0), ((16,), 0.0)]
)  # rank 3: mean as GlobalAveragePool; beta 0: no Add
def test_keras_layer_norm_becomes_one_layernormalization_node(shape, beta):
    inputs = keras.Input(shape, name="x")
    norm = keras.layers.LayerNormalization(epsilon=1e-5)
    model = keras.Model(inputs, keras.layers.Dense(4)(norm(inputs)))
    norm.set_weights(
        [np.linspace(0.5, 2, 16, dtype=np.float32), beta * np.linspace(-1, 1, 16, dtype=np.float32)]
    )
    exported = keras_to_onnx(model)
    cleaned = ir.serde.serialize_model(passes.cleanup(ir.serde.deserialize_model(exported)))
    ops = [n.op_type for n in cleaned.graph.node]
    assert ops.count("LayerNormalization") == 1
    assert not {"ReduceMean", "GlobalAveragePool", "Sqrt", "Reciprocal"} & set(ops)
    x = np.random.default_rng(0).normal(3, 2, (8, *shape)).astype(np.float32)
    expected = np.asarray(model(x))
    np.testing.assert_allclose(
        session(cleaned).run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-4
    )
