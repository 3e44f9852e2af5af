"""Learning-rate warm-up and scaling schedules for large global batches.

With linear LR scaling (``strategy.optimizer(opt)`` multiplies the rate by the number of
workers), the first epochs are unstable; Goyal et al. (2017) start from the single-worker rate
and ramp up linearly. ``LearningRateWarmup`` does that per batch, on every rank alike.
"""
from __future__ import annotations

from typing import Callable

import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import keras_compat, upstream
from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix
from tfdist.callbacks import _runtime


def learning_rate_value(optimizer) -> float:
    """The optimizer's current learning rate as a float (tf-keras or Keras 3)."""
    value = optimizer.learning_rate  # a tf.Variable, a Keras 3 Variable, a tensor or a number
    return float(value.numpy()) if hasattr(value, "numpy") else float(value)



def uses_schedule(optimizer) -> bool:
    """Whether the optimizer's rate is a LearningRateSchedule (both Kerases hide it behind
    ``optimizer.learning_rate``, which then reads the current value)."""
    return keras_compat.is_keras(upstream.raw_learning_rate(optimizer), "optimizers.schedules.LearningRateSchedule")


def _set_lr(optimizer, value: float) -> None:
    if uses_schedule(optimizer):
        raise ArgumentTypeError("the optimizer's learning rate is a LearningRateSchedule, which this "
                                "callback cannot overwrite; fix: pass a float learning rate, or drop the "
                                "callback and build the warm-up into the schedule")
    optimizer.learning_rate = value


def warmup_learning_rate(target_lr: float, start_factor: float, warmup_epochs: float,
                         epoch: int, batch: int, steps_per_epoch: int) -> float:
    """The rate at ``batch`` of ``epoch``: linear from ``target_lr*start_factor`` to ``target_lr``."""
    progress = min(1.0, (epoch + batch / steps_per_epoch) / warmup_epochs) if warmup_epochs > 0 else 1.0
    return target_lr * (start_factor + (1.0 - start_factor) * progress)


class LearningRateWarmup(tf_keras.callbacks.Callback):
    """Ramp the learning rate linearly over ``warmup_epochs`` epochs, updated every batch.

    ``start_factor`` defaults to ``1/replicas`` (Horovod's size, or the tf.distribute replicas):
    training starts at the single-worker rate and reaches the (already scaled) optimizer rate at
    the end of the warm-up.

        strategy.fit(model, x, y, callbacks=[LearningRateWarmup(warmup_epochs=3)])
    """

    def __init__(self, warmup_epochs: float = 5, start_factor: float | None = None,
                 steps_per_epoch: int | None = None, verbose: int = 0) -> None:
        super().__init__()
        if warmup_epochs < 0:
            raise ArgumentValueError(with_fix(f"`warmup_epochs` must be >= 0, got {warmup_epochs}",
                                              "pass warmup_epochs=0 (no warm-up) or more"))
        if start_factor is not None and not 0 < start_factor <= 1:
            raise ArgumentValueError(with_fix(f"`start_factor` must be in (0, 1], got {start_factor}",
                                              "pass e.g. start_factor=1/number_of_workers"))
        self.warmup_epochs = warmup_epochs
        self.start_factor = start_factor
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.target_lr: float | None = None
        self._epoch = 0

    def on_train_begin(self, logs=None) -> None:
        if self.target_lr is None:
            self.target_lr = learning_rate_value(self.model.optimizer)
        if self.start_factor is None:
            self.start_factor = 1.0 / _runtime.replicas(self.model)
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        if not self.steps_per_epoch:
            raise ArgumentValueError("LearningRateWarmup needs the steps per epoch, which Keras did not "
                                     "report; fix: pass `steps_per_epoch=` to the callback")

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self._epoch = epoch

    def on_train_batch_begin(self, batch: int, logs=None) -> None:
        if self._epoch > self.warmup_epochs:
            return
        lr = warmup_learning_rate(self.target_lr, self.start_factor, self.warmup_epochs,
                                  self._epoch, batch, self.steps_per_epoch)
        _set_lr(self.model.optimizer, lr)

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        if logs is not None:
            logs["lr"] = learning_rate_value(self.model.optimizer)
        if self.verbose and epoch + 1 == self.warmup_epochs and _runtime.is_chief(self.model):
            print(f"Epoch {epoch + 1}: learning-rate warm-up done, rate {self.target_lr:.6g}")


class LearningRateScale(tf_keras.callbacks.Callback):
    """Multiply the initial learning rate by ``multiplier`` for epochs in [start_epoch, end_epoch).

    ``multiplier`` is a number or a function of the epoch, e.g. step decay
    ``LearningRateScale(0.1, start_epoch=30, end_epoch=60)``; stack several for a piecewise schedule.
    """

    def __init__(self, multiplier: float | Callable[[int], float], start_epoch: int = 0,
                 end_epoch: int | None = None, initial_lr: float | None = None) -> None:
        super().__init__()
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.initial_lr = initial_lr

    def on_train_begin(self, logs=None) -> None:
        if self.initial_lr is None:
            self.initial_lr = learning_rate_value(self.model.optimizer)

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return
        _set_lr(self.model.optimizer, self.initial_lr * float(self.multiplier(epoch)))
