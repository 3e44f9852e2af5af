"""Horovod's Keras callbacks (``horovod.tensorflow.keras.callbacks``) for tf-keras and Keras 3 models.

Same names, arguments and formulas as Horovod 0.28.1, on tfdist's callbacks; two differences, both
towards exactness:

* ``BroadcastGlobalVariablesCallback`` broadcasts before the first training step, not after it (Horovod
  broadcasts at the end of batch 0, so the first step's gradients come from different weights). A
  model not built when training starts (a ``Sequential`` without ``Input`` under plain
  ``model.fit``; both Kerases build it inside the first traced step) is built first from the shapes of
  the first batch: the first trace of the training function is stopped before it runs a step, the model
  is built eagerly and broadcast, then the step runs. Every rank's first step sees rank 0's weights.
* ``MetricAverageCallback`` also averages the logs at the end of ``evaluate`` (``tfdist.callbacks.MetricAverage``).

Outside an initialised Horovod job every callback here is a no-op or, for the learning-rate ones,
uses ``size() == 1``, so they work in a plain ``model.fit`` of either Keras.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import upstream
from tfdist.callbacks import MetricAverage, _runtime
from tfdist.callbacks.learning_rate import learning_rate_value, uses_schedule
from tfdist.errors import ArgumentTypeError, ArgumentValueError, TfdistError, with_fix
from tfdist.runtime.allreduce import broadcast_variables


class _FirstTraceStopped(Exception):
    """Raised inside the first trace of the training step, before it runs, to build the model first."""


class BroadcastGlobalVariablesCallback(tf_keras.callbacks.Callback):
    """Broadcast ``root_rank``'s model weights and optimizer state to every rank before the first step.

    ``local_variables``: variables each rank keeps (not broadcast), as in Horovod.
    """

    def __init__(self, root_rank: int, device: str = "", local_variables: Any = None) -> None:
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local: set[int] = set()
        self._local_held: list = []
        if local_variables is not None:
            for variable in (local_variables if isinstance(local_variables, (list, tuple, set))
                             else [local_variables]):
                self.register_local_var(variable)

    def register_local_var(self, var: Any) -> None:
        """Keep ``var`` per rank: it is not broadcast."""
        if not hasattr(var, "assign"):
            raise ArgumentTypeError(with_fix(f"`local_variables` must hold variables, got {type(var).__name__}",
                                             "pass model or layer variables"))
        self._local.add(id(var))
        self._local_held.append(var)  # keeps the ids valid

    def on_train_begin(self, logs=None) -> None:
        if _runtime.horovod() is None or self.broadcast_done:
            return
        if self.model.built:
            self._broadcast()
        else:
            self._build_then_broadcast_before_first_step()

    def _broadcast(self) -> None:
        optimizer = self.model.optimizer
        with tf.device(self.device):
            if optimizer is not None and not upstream.optimizer_is_built(optimizer):
                optimizer.build(self.model.trainable_variables)
            broadcast_variables([v for v in self.model.variables if id(v) not in self._local],
                                root_rank=self.root_rank)
            if optimizer is not None:
                broadcast_variables(list(optimizer.variables), root_rank=self.root_rank)
        self.broadcast_done = True

    def _build_then_broadcast_before_first_step(self) -> None:
        model = self.model
        train_step = model.train_step
        seen: dict[str, Any] = {}

        def stop_first_trace(data: Any) -> Any:
            if not model.built:
                inputs = data[0] if isinstance(data, (tuple, list)) else data
                seen["inputs"] = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), inputs)
                raise _FirstTraceStopped()
            return train_step(data)

        model.train_step = stop_first_trace
        model.make_train_function(force=True)
        train_function = model.train_function

        def build_broadcast_then_train(iterator: Any) -> Any:
            try:
                return train_function(iterator)
            except _FirstTraceStopped:
                del model.train_step  # the model's own again
                model(tf.nest.map_structure(lambda s: tf.zeros([d or 1 for d in s.shape], s.dtype),
                                            seen["inputs"]), training=False)
                self._broadcast()
                # A fresh tf.function: the stopped one counts as called, and the real first trace
                # still creates variables (compiled metrics, loss trackers).
                model.make_train_function(force=True)
                return model.train_function(iterator)

        model.train_function = build_broadcast_then_train

    def on_train_end(self, logs=None) -> None:
        if "train_step" in vars(self.model):  # our wrapper: the model's own train_step again
            del self.model.train_step


class MetricAverageCallback(MetricAverage):
    """Replace each epoch metric (and each evaluation result) with its mean over the ranks, in sorted
    name order. Put it before the callbacks that read metrics, as in Horovod."""

    def __init__(self, device: str = "") -> None:
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        with tf.device(self.device):
            super().on_epoch_end(epoch, logs)


def _size() -> int:
    hvd = _runtime.horovod()
    return hvd.size() if hvd is not None else 1


def _rank() -> int:
    hvd = _runtime.horovod()
    return hvd.rank() if hvd is not None else 0


class LearningRateScheduleCallback(tf_keras.callbacks.Callback):
    """Set the rate to ``initial_lr * multiplier(epoch)`` for epochs in [start_epoch, end_epoch).

    ``multiplier``: a number (then ``multiplier ** (epoch - start_epoch)``) or a function of the
    epoch. ``staircase=True``: set at the first batch of each epoch; ``False``: every batch, with
    the fractional epoch ``epoch + batch / steps_per_epoch``. ``momentum_correction``: for the batch
    where the rate changes, momentum is scaled by new/old rate and then restored (Goyal et al.); it
    needs a momentum held in a variable (legacy tf-keras optimizers): a non-zero Python-number
    momentum (the optimizers of Keras 3 and tf-keras 2.11+) is compiled into the step and is refused
    at the start of training, naming the fix.
    """

    def __init__(self, initial_lr: float, multiplier: float | Callable[[float], float], start_epoch: int = 0,
                 end_epoch: int | None = None, staircase: bool = True, momentum_correction: bool = True,
                 steps_per_epoch: int | None = None) -> None:
        super().__init__()
        if initial_lr is None:
            raise ArgumentValueError(with_fix("`initial_lr` is required", "pass the optimizer's initial rate"))
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.multiplier = multiplier if callable(multiplier) else (
            lambda epoch: multiplier ** (epoch - start_epoch))
        self.current_epoch: int | None = None
        self._restore_momentum: float | None = None

    def on_train_begin(self, logs=None) -> None:
        if uses_schedule(self.model.optimizer):
            raise ArgumentTypeError(with_fix(
                f"{type(self).__name__} cannot set the rate of an optimizer whose learning rate is a "
                "LearningRateSchedule", "pass a float learning rate to the optimizer"))
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = (self.params or {}).get("steps")
            if not self.steps_per_epoch:
                raise ArgumentValueError(with_fix(
                    f"{type(self).__name__} could not find the steps per epoch (Keras did not report them)",
                    "pass steps_per_epoch= to the callback"))
        momentum = getattr(self.model.optimizer, "momentum", None)
        if self.momentum_correction and isinstance(momentum, (int, float)) and momentum:
            raise ArgumentValueError(with_fix(
                f"momentum_correction=True needs a momentum variable, but {type(self.model.optimizer).__name__}"
                f"'s momentum is the number {momentum} compiled into the training step",
                "pass momentum_correction=False, or use a tf_keras.optimizers.legacy optimizer"))

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self.current_epoch = epoch

    def _adjust(self, epoch: float) -> None:
        optimizer = self.model.optimizer
        old_lr = learning_rate_value(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        optimizer.learning_rate = new_lr
        momentum = getattr(optimizer, "momentum", None)
        if self.momentum_correction and hasattr(momentum, "assign") and old_lr:
            self._restore_momentum = float(momentum.numpy())
            momentum.assign(self._restore_momentum * new_lr / old_lr)

    def on_train_batch_begin(self, batch: int, logs=None) -> None:
        epoch = self.current_epoch
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust(epoch)
        else:
            self._adjust(epoch + float(batch) / self.steps_per_epoch)

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        if self._restore_momentum is not None:
            self.model.optimizer.momentum.assign(self._restore_momentum)
            self._restore_momentum = None

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        if logs is not None:
            logs["lr"] = learning_rate_value(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's warm-up: from ``initial_lr / size()`` to ``initial_lr`` linearly over ``warmup_epochs``,
    set every batch. At batch ``b`` of epoch ``e`` (``s`` steps per epoch, ``n`` ranks, ``W`` epochs):
    ``initial_lr / n * ((e + (b + 1) / s) * (n - 1) / W + 1)``.
    """

    def __init__(self, initial_lr: float, warmup_epochs: int = 5, momentum_correction: bool = True,
                 steps_per_epoch: int | None = None, verbose: int = 0) -> None:
        def multiplier(epoch: float) -> float:
            epoch += 1.0 / self.steps_per_epoch  # round numbers at each epoch's end, as Horovod
            n = _size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{learning_rate_value(self.model.optimizer):g}.")


class _NotProvided:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TfdistError(with_fix(
            "BestModelCheckpoint (a helper of horovod.spark estimators, which set its file path) is not "
            "provided by tfdist.horovod",
            "use your Keras's ModelCheckpoint(path, save_best_only=True) on rank 0 only"))


BestModelCheckpoint = _NotProvided

__all__ = ["BroadcastGlobalVariablesCallback", "LearningRateScheduleCallback", "LearningRateWarmupCallback",
           "MetricAverageCallback"]
