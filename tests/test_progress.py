import keras
import numpy as np

from models.progress import TrainingProgress


def test_training_reports_steps_with_an_eta_until_the_last():
    lines = []
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.ones((12, 4), np.float32), np.zeros((12, 1), np.float32)
    model.fit(
        x,
        y,
        batch_size=4,
        epochs=2,
        verbose=0,
        callbacks=[TrainingProgress(2, 3, lines.append, every_seconds=0)],
    )
    assert len(lines) == 6 and lines[0].startswith("training: step 1/6 (17 %), loss")
    assert lines[-1].startswith("training: step 6/6 (100 %)") and lines[-1].endswith(
        "about 0 min left"
    )
