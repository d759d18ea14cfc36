"""The progress line (`models.progress.ProgressLine`) as a Keras callback, for `model.fit`."""

import keras

from models.progress import ProgressLine


class TrainingProgress(keras.callbacks.Callback):
    """A ProgressLine over the steps of `model.fit`."""

    def __init__(self, epochs: int, steps_per_epoch: int, log=print, every_seconds: float = 30.0):
        super().__init__()
        self.line = ProgressLine(epochs * steps_per_epoch, log, every_seconds)
        self.steps_per_epoch, self.epoch = steps_per_epoch, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = f"loss {logs['loss']:.4f}" if logs and "loss" in logs else ""
        self.line.update(self.epoch * self.steps_per_epoch + batch + 1, loss)
