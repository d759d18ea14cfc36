"""The 3DGAN training command: a few steps on simulated showers, checkpointed and resumed."""

import json

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from models.calogan.detector import sampling_fraction_fit  # noqa: E402
from models.calogan.train import TrainRecipe, train  # noqa: E402


def test_training_stops_on_its_budget_and_resumes_from_the_step_reached(tmp_path):
    recipe = TrainRecipe(showers=64, epochs=1, batch=16)  # 4 steps per epoch
    train(recipe, minutes=0, out_dir=tmp_path, log=lambda *_: None)  # a spent budget still makes one step
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["step"] == 1 and np.isfinite([state["history"][0]["d_loss"], state["history"][0]["g_loss"]]).all()
    first = (tmp_path / "generator.weights.h5").read_bytes()
    train(recipe, out_dir=tmp_path, log=lambda *_: None)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["step"] == 4 and [h["step"] for h in state["history"]] == [1, 4]  # saved at the epoch end
    assert (tmp_path / "generator.weights.h5").read_bytes() != first  # the resumed run kept learning
    messages = []
    train(recipe, out_dir=tmp_path, log=messages.append)
    assert "already trained for 4 steps" in messages[0]


def test_trained_weights_load_into_the_float32_generator(tmp_path):
    import keras

    from models.calogan.network import generator

    train(TrainRecipe(showers=32, epochs=1, batch=16), out_dir=tmp_path, log=lambda *_: None)
    model = generator()
    model.load_weights(tmp_path / "generator.weights.h5")
    assert keras.config.dtype_policy().name == "float32"  # training's mixed policy did not leak out
    assert all(w.dtype == "float32" for w in model.weights)
    assert np.isfinite(model(np.ones((2, 200), np.float32)).numpy()).all()


def test_sampling_fraction_fit_matches_the_published_curve():
    assert sampling_fraction_fit(np.array([10.0, 500.0])) == pytest.approx([0.02182, 0.01811], abs=2e-5)
