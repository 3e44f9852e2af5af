"""Examples per second and step time, into the epoch logs (and so into TensorBoard)."""
from __future__ import annotations

import time

import tensorflow as tf

from tfdist.callbacks import _runtime


class Throughput(tf.keras.callbacks.Callback):
    """Log ``examples_per_second`` (all workers), ``examples_per_second_per_worker`` and
    ``step_time_ms`` at each epoch end.

    ``batch_size`` is the batch one worker's step consumes; ``workers`` how many such steps run
    at once (default: the Horovod size, else 1). ``strategy.throughput(batch_size)`` fills both
    in for any backend. ``skip_first_steps`` leaves the tracing steps out of the first figure.
    """

    def __init__(self, batch_size: int, workers: int | None = None, skip_first_steps: int = 1) -> None:
        super().__init__()
        if batch_size <= 0:
            raise ValueError(f"`batch_size` must be a positive per-worker batch size, got {batch_size}")
        self.batch_size = batch_size
        self.workers = workers
        self.skip_first_steps = skip_first_steps
        self._steps = 0
        self._start: float | None = None
        self._global_step = 0
        self.history: list[float] = []

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self._steps = 0
        self._start = None

    def on_train_batch_begin(self, batch: int, logs=None) -> None:
        if self._start is None and self._global_step >= self.skip_first_steps:
            self._start = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        self._global_step += 1
        if self._start is not None:
            self._steps += 1

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        if self._start is None or self._steps == 0 or logs is None:
            return
        elapsed = time.perf_counter() - self._start
        per_worker = self._steps * self.batch_size / elapsed
        logs["examples_per_second_per_worker"] = per_worker
        logs["examples_per_second"] = per_worker * (self.workers or _runtime.world_size())
        logs["step_time_ms"] = 1000.0 * elapsed / self._steps
        self.history.append(logs["examples_per_second"])
