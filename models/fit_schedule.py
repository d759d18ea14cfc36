"""Keras `fit`'s learning rate, length and progress line as one callback: a cosine schedule that
can fit training into a time budget measured on `fit`'s own steps."""

import math
import time

import keras

from models.progress import ProgressLine

PACE_STEPS = 10  # steady steps of `fit` timed before a budget first estimates the schedule's end


class CosineSchedule(keras.callbacks.Callback):
    """Sets the learning rate each step, decaying from `peak` to zero over `steps` (as Keras'
    CosineDecay does), with a progress line. With a budget of `seconds`, counted from the start
    of `fit`, the schedule ends instead after as many steps as fit in it, and training stops
    there. The end is estimated after `PACE_STEPS` steady steps and again after each step, at
    the pace of all steady steps so far, since the first few run slower than the rest. The first
    step traces the model: it is charged to the budget, not to the pace."""

    def __init__(
        self,
        peak: float,
        steps: int,
        seconds: float | None = None,
        log=print,
        every_seconds: float = 30.0,
    ):
        super().__init__()
        self.peak, self.steps, self.seconds, self.log = peak, steps, seconds, log
        self.planned = steps
        self.line = ProgressLine(steps, log, every_seconds)
        self.done = 0

    def rate(self, step: int) -> float:
        return self.peak * 0.5 * (1 + math.cos(math.pi * min(step, self.steps) / self.steps))

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()

    def on_train_batch_begin(self, batch, logs=None):
        self.model.optimizer.learning_rate = self.rate(self.done)

    def on_train_batch_end(self, batch, logs=None):
        self.done += 1
        if self.done == 1:
            self.steady_since = time.monotonic()
        if self.seconds is not None and self.done > PACE_STEPS:
            self._end_within_budget()
        loss = f"loss {logs['loss']:.4f}" if logs and "loss" in logs else ""
        self.line.update(self.done, loss)
        if self.done >= self.steps:
            self.model.stop_training = True

    def _end_within_budget(self):
        now = time.monotonic()
        pace = (now - self.steady_since) / (self.done - 1)
        fit_in = self.done + int((self.start + self.seconds - now) / pace)
        if self.done == 1 + PACE_STEPS and fit_in < self.planned:
            self.log(
                f"training about {fit_in} of {self.planned} steps: {self.seconds / 60:g} minutes "
                f"at {pace:.2f} s a step on this CPU"
            )
        self.steps = self.line.total = max(self.done, min(self.planned, fit_in))
