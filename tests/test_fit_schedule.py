"""The training schedule callback on a tiny Keras model: cosine rates, a progress line, and an end
fitted to a time budget on a fake clock."""

import keras
import numpy as np
import pytest

from models import fit_schedule
from models.fit_schedule import PACE_STEPS, CosineSchedule


class _Rates(keras.callbacks.Callback):
    """Records the learning rate each step trained with."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(float(self.model.optimizer.learning_rate))


class _StepClock(keras.callbacks.Callback):
    """A fake clock that a step moves on: `first` seconds for the traced first, then `warm`
    seconds for each of the next `warm_steps`, then `step`."""

    def __init__(self, first: float, step: float, warm_steps: int = 0, warm: float = 0.0):
        super().__init__()
        self.now, self.first, self.step, self.warm_steps, self.warm = (
            0.0,
            first,
            step,
            warm_steps,
            warm,
        )
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.steps == 1:
            self.now += self.first
        else:
            self.now += self.warm if self.steps <= 1 + self.warm_steps else self.step


def _fit(callbacks, epochs=2, steps_per_epoch=3):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1.0), "mse")

    def batches():
        while True:
            yield np.ones((4, 4), np.float32), np.zeros((4, 1), np.float32)

    model.fit(
        batches(),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        shuffle=False,  # the stream is its own order
        verbose=0,
        callbacks=callbacks,
    )


def test_rates_follow_keras_cosine_decay_and_progress_is_reported_to_the_last_step():
    lines, rates = [], _Rates()
    _fit([CosineSchedule(0.01, 6, log=lines.append, every_seconds=0), rates])
    cosine = keras.optimizers.schedules.CosineDecay(0.01, 6)
    assert rates.seen == pytest.approx([float(cosine(step)) for step in range(6)], rel=1e-5)
    assert len(lines) == 6 and lines[0].startswith("training: step 1/6 (17 %), loss")
    assert lines[-1].startswith("training: step 6/6 (100 %)")


def test_a_budget_ends_training_and_its_schedule_when_the_time_is_spent(monkeypatch):
    clock, lines, rates = _StepClock(first=30.0, step=1.0), [], _Rates()
    monkeypatch.setattr(fit_schedule.time, "monotonic", lambda: clock.now)
    schedule = CosineSchedule(0.01, 1000, seconds=100.0, log=lines.append)
    _fit([clock, schedule, rates], epochs=1, steps_per_epoch=1000)
    # 30 s for the first step, then one a second: 70 more fill the 100 s
    assert schedule.done == schedule.steps == 71 and clock.now == 100.0
    assert "training about 71 of 1000 steps: 1.66667 minutes at 1.00 s a step on this CPU" in lines
    assert rates.seen[PACE_STEPS + 1] == pytest.approx(schedule.rate(PACE_STEPS + 1))
    assert rates.seen[-1] < 1e-5 < rates.seen[-2]  # the rate has decayed to zero at the end


def test_steps_faster_than_the_first_paced_ones_lengthen_the_schedule_within_the_budget(
    monkeypatch,
):
    clock, lines = _StepClock(first=30.0, step=1.0, warm_steps=PACE_STEPS, warm=2.0), []
    monkeypatch.setattr(fit_schedule.time, "monotonic", lambda: clock.now)
    schedule = CosineSchedule(0.01, 1000, seconds=100.0, log=lines.append)
    _fit([clock, schedule], epochs=1, steps_per_epoch=1000)
    # the first estimate, at 2 s a step: 11 steps by 50 s, 25 more in the 50 s left
    assert "training about 36 of 1000 steps" in lines[1]
    assert schedule.done == schedule.steps > 36 and clock.now <= 100.0


def test_a_budget_spent_before_the_pace_is_known_stops_at_once(monkeypatch):
    clock = _StepClock(first=500.0, step=1.0)
    monkeypatch.setattr(fit_schedule.time, "monotonic", lambda: clock.now)
    schedule = CosineSchedule(0.01, 1000, seconds=100.0, log=lambda *_: None)
    _fit([clock, schedule], epochs=1, steps_per_epoch=1000)
    assert schedule.done == 1 + PACE_STEPS


def test_a_budget_that_holds_every_step_changes_nothing(monkeypatch):
    clock, lines = _StepClock(first=1.0, step=1.0), []
    monkeypatch.setattr(fit_schedule.time, "monotonic", lambda: clock.now)
    schedule = CosineSchedule(0.01, 40, seconds=1000.0, log=lines.append, every_seconds=1e9)
    _fit([clock, schedule], epochs=2, steps_per_epoch=20)
    assert schedule.done == schedule.steps == 40 and not any("of 40 steps" in x for x in lines)
