"""`python -m models.resnet50 build`: train ResNet-50 on Fashion-MNIST, export ONNX, cache both.

Artefacts of the reference model in `$QUANTIZE_CACHE/resnet50/`, of any other training recipe
(the demo's) in `$QUANTIZE_CACHE/resnet50/NAME/`: `resnet50.keras`, `resnet50.onnx` (with the
preprocessing recipe in its metadata) and `calib.npz` (training images, never test images).
`$QUANTIZE_CACHE/resnet50/test.npz` holds the 10k test images, normalised, with labels.
"""

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from models.resnet50 import data
from onnxio import atomic_path, save_model
from quantize.cache import cache_dir
from quantize.recipe import metadata


@dataclass(frozen=True)
class TrainRecipe:
    name: str = "reference"  # the benchmarks' model; another name is cached apart
    size: int = 32
    epochs: int = 4
    batch: int = 128
    learning_rate: float = 2e-3
    train_samples: int = 60000
    stages: tuple = (3, 4, 6, 3)
    width: int = 64
    calib_samples: int = 1000
    seed: int = 0
    minutes: float | None = None  # a budget: fewer training steps where this CPU is slower
    bn_momentum: float = 0.99


# What `make demo` trains: minutes where the reference takes half an hour or more on 2 cores.
# Batch 32, not 128, gives BatchNorm's moving statistics enough steps to settle in one short
# epoch (79 % top-1 on all 12,000 images at BatchNorm momentum 0.99; 33 % at batch 128). An AVX2
# CPU trains several times slower than an AMX one, so the demo trains as many steps as this CPU
# fits in its budget; momentum 0.9 lets the moving statistics settle within the
# hundred-odd steps that may leave (at 0.99 the test top-1 stayed near chance).
DEMO = TrainRecipe(
    name="demo", epochs=1, train_samples=12000, batch=32, minutes=4.0, bn_momentum=0.9
)


# The trained models a benchmark can run on (`--model`): the reference takes hours on 2 AVX2 cores.
TRAINED = {recipe.name: recipe for recipe in (TrainRecipe(), DEMO)}


def add_model_option(parser: argparse.ArgumentParser) -> None:
    """A benchmark's `--model`: the key of TRAINED it runs on."""
    parser.add_argument(
        "--model",
        choices=TRAINED,
        default=TrainRecipe.name,
        help="the trained ResNet-50: the reference (4 epochs) or `make demo`'s (minutes)",
    )


def trained_as(proto) -> str:
    """How the exported ResNet-50 `proto` was trained, from the recipe its export records."""
    recipe = json.loads(metadata(proto)["resnet50.train_recipe"])
    model = {
        TrainRecipe.name: "the reference model",
        DEMO.name: "the demo model (`make demo`)",
    }.get(recipe["name"], f"the {recipe['name']!r} model")
    epochs = f"{recipe['epochs']} epoch{'s' if recipe['epochs'] > 1 else ''}"
    return f"{model}: {epochs} on {recipe['train_samples']} images"


def test_set() -> Path:
    """The 10k test images and labels: one file, whichever recipe trained the model."""
    return cache_dir("resnet50") / "test.npz"


def test_images(
    limit: int | None = None, path: Path | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of the test set (`path`, default `test_set()`), the first `limit` of them."""
    with np.load(path or test_set()) as test:
        return test["image"][:limit], test["label"][:limit]


def build(recipe: TrainRecipe = TrainRecipe(), out_dir: Path | None = None, log=print) -> Path:
    """Train (unless cached) and export; returns the directory holding the artefacts."""
    reference = recipe.name == TrainRecipe.name
    out_dir = Path(out_dir or cache_dir("resnet50", *(() if reference else (recipe.name,))))
    onnx_path = out_dir / "resnet50.onnx"
    if onnx_path.exists():
        log(f"cached: {onnx_path}")
        return out_dir
    import keras

    from models.fit_schedule import CosineSchedule
    from quantize.frontend.tensorflow import keras_to_onnx

    train_x, train_y = data.load_split("train")
    test_x, test_y = data.load_split("test")
    train_x, train_y = train_x[: recipe.train_samples], train_y[: recipe.train_samples]
    x = data.normalise(data.to_rgb(train_x, recipe.size))
    keras.utils.set_random_seed(recipe.seed)
    per_epoch = int(np.ceil(len(x) / recipe.batch))
    seconds = recipe.minutes * 60 if recipe.minutes else None
    schedule = CosineSchedule(recipe.learning_rate, recipe.epochs * per_epoch, seconds, log)
    model = _compiled(recipe)
    start = time.perf_counter()
    model.fit(
        _augmented(x, train_y, recipe),
        epochs=recipe.epochs,
        steps_per_epoch=per_epoch,
        shuffle=False,  # _augmented shuffles
        verbose=0,
        callbacks=[schedule],
    )
    recipe = _as_trained(recipe, schedule.done, per_epoch)
    log(f"trained in {time.perf_counter() - start:.0f} s")

    rng = np.random.default_rng(recipe.seed)
    calib = x[rng.choice(len(x), recipe.calib_samples, replace=False)]
    with atomic_path(out_dir / "calib.npz") as tmp:
        np.savez(tmp.open("wb"), image=calib)
    with atomic_path(test_set()) as tmp:
        np.savez(
            tmp.open("wb"), image=data.normalise(data.to_rgb(test_x, recipe.size)), label=test_y
        )
    model.save(out_dir / "resnet50.keras")
    proto = keras_to_onnx(model)
    recipe_meta = dict(data.PREPROCESS, size=recipe.size)
    proto.metadata_props.add(key="quantize.preprocess", value=json.dumps(recipe_meta))
    proto.metadata_props.add(key="resnet50.train_recipe", value=json.dumps(asdict(recipe)))
    save_model(proto, onnx_path)
    log(f"wrote {onnx_path}")
    return out_dir


def _compiled(recipe: TrainRecipe):
    """The recipe's ResNet-50, compiled for training (the schedule sets its learning rate)."""
    import keras

    from models.resnet50.network import resnet50

    model = resnet50(stages=recipe.stages, width=recipe.width, bn_momentum=recipe.bn_momentum)
    model.compile(
        keras.optimizers.Adam(recipe.learning_rate),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _as_trained(recipe: TrainRecipe, steps: int, per_epoch: int) -> TrainRecipe:
    """The recipe as `steps` of training carried it out: fewer images or epochs than planned
    where a budget ended it early."""
    return replace(
        recipe,
        epochs=math.ceil(steps / per_epoch),
        train_samples=min(recipe.train_samples, steps * recipe.batch),
    )


def _augmented(x: np.ndarray, y: np.ndarray, recipe: TrainRecipe):
    """Endless shuffled batches with random horizontal flips."""
    rng = np.random.default_rng(recipe.seed)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(x), recipe.batch):
            idx = order[i : i + recipe.batch]
            xb = x[idx]
            flip = rng.random(len(idx)) < 0.5
            xb[flip] = xb[flip, :, ::-1]
            yield xb, y[idx]
