"""The 3DGAN training command: a few steps on simulated showers, checkpointed and resumed."""

import json
from dataclasses import asdict

import numpy as np
import pytest
import tensorflow  # noqa: F401  (a required dependency: missing, it fails the suite)

from models.calogan.detector import sampling_fraction_fit  # noqa: E402
from models.calogan.train import TrainRecipe, train  # noqa: E402

TINY = TrainRecipe(showers=4, epochs=1, batch=2)  # 2 steps


@pytest.fixture(scope="module")
def tiny_training(tmp_path_factory):
    """A folder holding TINY's training, which the tests below only read."""
    folder = tmp_path_factory.mktemp("tiny_training")
    train(TINY, out_dir=folder, log=lambda *_: None)
    return folder


def test_training_stops_on_its_budget_and_resumes_from_the_step_reached(tmp_path):
    recipe = TrainRecipe(showers=6, epochs=1, batch=2)  # 3 steps per epoch
    train(
        recipe, minutes=0, out_dir=tmp_path, log=lambda *_: None
    )  # a spent budget still makes one step
    state = json.loads((tmp_path / "state.json").read_text())
    assert (
        state["step"] == 1
        and np.isfinite([state["history"][0]["d_loss"], state["history"][0]["g_loss"]]).all()
    )
    first = (tmp_path / "generator.weights.h5").read_bytes()
    resumed = []
    train(recipe, out_dir=tmp_path, log=resumed.append)
    assert resumed[0].startswith("training: step 2/3 (67 %), d_loss")  # the resumed run's first
    assert resumed[-2].startswith("training: step 3/3 (100 %)")  # then the checkpoint's line
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["step"] == 3 and [h["step"] for h in state["history"]] == [
        1,
        3,
    ]  # saved at the epoch end
    assert (
        tmp_path / "generator.weights.h5"
    ).read_bytes() != first  # the resumed run kept learning
    messages = []
    train(recipe, out_dir=tmp_path, log=messages.append)
    assert "already trained for 3 steps" in messages[0]


def test_trained_weights_load_into_the_float32_generator(tiny_training):
    import keras

    from models.calogan.network import generator

    model = generator()
    model.load_weights(tiny_training / "generator.weights.h5")
    assert keras.config.dtype_policy().name == "float32"  # training's mixed policy did not leak out
    assert all(w.dtype == "float32" for w in model.weights)
    assert np.isfinite(model(np.ones((2, 200), np.float32)).numpy()).all()


def test_sampling_fraction_fit_matches_the_published_curve():
    assert sampling_fraction_fit(np.array([10.0, 500.0])) == pytest.approx(
        [0.02182, 0.01811], abs=2e-5
    )


def test_the_generator_is_judged_by_the_discriminator_in_the_mode_it_is_trained_in():
    import keras

    from models.calogan.network import discriminator, generator
    from models.calogan.train import generator_loss, heads_loss

    keras.utils.set_random_seed(0)
    gen, disc = generator(), discriminator()
    for layer in disc.layers:
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0  # deterministic, so that only the BatchNorm mode can change the loss
    energy = np.array([[0.5], [1.0], [2.0], [4.0]], np.float32)
    latent = np.random.default_rng(0).normal(size=(4, 200)).astype(np.float32) * energy
    expected_sum = energy * 200

    def losses():
        fake = gen(latent, training=True)  # on its batch's statistics: the same showers every call
        return float(generator_loss(gen, disc, latent, energy, expected_sum)), float(
            heads_loss(
                disc(fake, training=False), np.ones((4, 1), np.float32), energy, expected_sum
            )
        )

    before, inference_before = losses()
    for (
        layer
    ) in disc.layers:  # moving statistics far from any batch's: only inference mode reads them
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(layer.moving_mean + 5.0)
            layer.moving_variance.assign(layer.moving_variance * 50.0)
    after, inference_after = losses()
    assert after == pytest.approx(before, rel=1e-5)
    assert abs(inference_after - inference_before) > 1e-3


def test_a_cache_is_brought_up_to_the_committed_checkpoint_of_its_recipe_only(
    tiny_training, tmp_path, monkeypatch
):
    from models.calogan.train import training_folder

    recipe, other, committed = TINY, TrainRecipe(showers=8, epochs=1, batch=2), tiny_training
    monkeypatch.setenv("QUANTIZE_CACHE", str(tmp_path / "cache"))
    assert not (training_folder(other, committed) / "state.json").exists()
    folder = training_folder(recipe, committed)
    assert json.loads((folder / "state.json").read_text())["step"] == 2
    assert (folder / "generator.weights.h5").read_bytes() == (
        committed / "generator.weights.h5"
    ).read_bytes()

    monkeypatch.setenv("QUANTIZE_CACHE", str(tmp_path / "own"))
    train(
        other, minutes=0, out_dir=tmp_path / "own" / "calogan", log=lambda *_: None
    )  # the user's own 1 step
    own = (tmp_path / "own" / "calogan" / "generator.weights.h5").read_bytes()
    assert (training_folder(None, committed) / "generator.weights.h5").read_bytes() == own


def test_the_committed_checkpoint_is_the_generator_the_models_are_built_from():
    from models.calogan.network import generator
    from models.calogan.train import COMMITTED_CHECKPOINT

    state = json.loads((COMMITTED_CHECKPOINT / "state.json").read_text())
    assert state["recipe"] == asdict(TrainRecipe()) and state["step"] > 0
    model = generator()
    model.load_weights(COMMITTED_CHECKPOINT / "generator.weights.h5")
    showers = model(np.random.default_rng(0).normal(size=(2, 200)).astype(np.float32)).numpy()
    assert np.isfinite(showers).all() and showers.sum() > 0
