"""The ResNet-50 reference pipeline on real Fashion-MNIST, with a tiny network trained in seconds."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from graphs import skip_outside_ci
from PIL import Image

from models.resnet50 import data
from models.resnet50.build import TrainRecipe, build, trained_as

pytestmark = skip_outside_ci(
    not data.DATASET_DIR.exists(), "needs the Debian package dataset-fashion-mnist"
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    os.environ["QUANTIZE_CACHE"] = str(root)
    recipe = TrainRecipe(
        name="tiny",
        epochs=1,
        train_samples=4096,
        batch=32,
        stages=(1, 1, 1, 1),
        width=16,
        calib_samples=256,
    )
    yield build(recipe, log=lambda *_: None)
    del os.environ["QUANTIZE_CACHE"]


def test_fashion_mnist_is_read_from_the_debian_package():
    images, labels = data.load_split("test")
    assert images.shape == (10000, 28, 28) and images.dtype == np.uint8
    assert sorted(np.unique(labels)) == list(range(10))


def test_build_caches_a_trained_model_with_its_preprocessing_recipe(cache):
    model = onnx.load(str(cache / "resnet50.onnx"))
    recipe = json.loads({p.key: p.value for p in model.metadata_props}["quantize.preprocess"])
    assert recipe["size"] == 32 and recipe["layout"] == "NHWC"
    assert (
        build(TrainRecipe(epochs=99), out_dir=cache, log=lambda *_: None) == cache
    )  # reused, not retrained
    # a recipe other than the reference is cached apart; the test images are shared
    assert cache == cache.parents[1] / "resnet50" / "tiny"
    assert (cache.parent / "test.npz").exists() and not (cache.parent / "resnet50.onnx").exists()
    # what the benchmarks' files say of it; 4096 images at batch 32 fit in one epoch
    assert trained_as(model) == "the 'tiny' model: 1 epoch on 4096 images"


def test_cli_quantizes_with_top1_report(cache, tmp_path):
    env = dict(os.environ, QUANTIZE_CACHE=str(cache.parents[1]))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "quantize",
            str(cache / "resnet50.onnx"),
            "--calib",
            str(cache / "calib.npz"),
            "-o",
            str(tmp_path / "int8.onnx"),
            "--report",
            str(tmp_path / "report.html"),
            "--evaluate",
            "resnet50",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    metric = json.loads((tmp_path / "report.json").read_text())["metric"]
    assert metric["fp32"] > 35, (
        f"the tiny network should learn Fashion-MNIST well above chance (10 %): {metric}"
    )
    assert abs(metric["drop"]) < 2.0, metric
    assert "top-1 %" in (tmp_path / "report.html").read_text()


def test_image_directory_calibration_uses_the_stored_recipe(cache, tmp_path):
    from quantize import Recipe, RunOptions, quantize

    images, _ = data.load_split("train")
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(40):
        Image.fromarray(images[i]).save(folder / f"{i:03d}.png")
    from_images = quantize(
        cache / "resnet50.onnx", folder, Recipe(kernel_timing=False), RunOptions(calib_samples=32)
    )
    from_arrays = quantize(
        cache / "resnet50.onnx",
        cache / "calib.npz",
        Recipe(kernel_timing=False),
        RunOptions(calib_samples=32),
    )
    first_scale = lambda m: next(i for i in m.graph.initializer if i.name.endswith("_scale"))  # noqa: E731
    a = onnx.numpy_helper.to_array(first_scale(from_images.model))
    b = onnx.numpy_helper.to_array(first_scale(from_arrays.model))
    assert a == pytest.approx(b, rel=0.25), (
        "the same normalisation gives input ranges of the same size"
    )
