"""The 3DGAN training command: a few steps on simulated showers, checkpointed and resumed."""

import json

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from models.calogan.detector import sampling_fraction_fit  # noqa: E402
from models.calogan.train import TrainRecipe, train  # noqa: E402


def test_training_checkpoints_every_epoch_and_resumes(tmp_path):
    recipe = TrainRecipe(showers=64, epochs=1, batch=32)
    train(recipe, out_dir=tmp_path, log=lambda *_: None)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["epoch"] == 1 and np.isfinite([state["history"][0]["d_loss"], state["history"][0]["g_loss"]]).all()
    first = (tmp_path / "generator.weights.h5").read_bytes()
    train(TrainRecipe(showers=64, epochs=2, batch=32), out_dir=tmp_path, log=lambda *_: None)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["epoch"] == 2 and len(state["history"]) == 2
    assert (tmp_path / "generator.weights.h5").read_bytes() != first  # the resumed run kept learning
    messages = []
    train(TrainRecipe(showers=64, epochs=2, batch=32), out_dir=tmp_path, log=messages.append)
    assert "already trained for 2 epochs" in messages[0]


def test_sampling_fraction_fit_matches_the_published_curve():
    assert sampling_fraction_fit(np.array([10.0, 500.0])) == pytest.approx([0.02182, 0.01811], abs=2e-5)
