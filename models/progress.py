"""A progress line with an ETA for long Keras training runs, every `every_seconds` (Keras'
verbose=2 prints once an epoch, and an epoch can take half an hour on 2 cores)."""

import time

import keras


class TrainingProgress(keras.callbacks.Callback):
    def __init__(self, epochs: int, steps_per_epoch: int, log=print, every_seconds: float = 30.0):
        super().__init__()
        self.total, self.steps_per_epoch, self.log, self.every = (
            epochs * steps_per_epoch,
            steps_per_epoch,
            log,
            every_seconds,
        )
        self.epoch, self.done = 0, 0

    def on_train_begin(self, logs=None):
        self.start = self.last = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.done = self.epoch * self.steps_per_epoch + batch + 1
        now = time.perf_counter()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            eta = (now - self.start) / self.done * (self.total - self.done)
            loss = f", loss {logs['loss']:.4f}" if logs and "loss" in logs else ""
            self.log(
                f"training: step {self.done}/{self.total} ({100 * self.done / self.total:.0f} %){loss}, "
                f"about {eta / 60:.0f} min left"
            )
