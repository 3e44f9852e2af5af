"""Examples per second and step time, into the epoch logs (and so into TensorBoard)."""
from __future__ import annotations

import time

import tensorflow as tf
import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist.callbacks import _runtime
from tfdist.errors import ArgumentValueError, with_fix


class Throughput(tf_keras.callbacks.Callback):
    """Log ``examples_per_second`` (all workers), ``examples_per_second_per_worker`` and
    ``step_time_ms`` at each epoch end.

    ``batch_size`` is the batch one replica consumes per step; ``replicas`` how many replicas
    step together and ``workers`` how many processes share the work (default: what the strategy
    ``make_strategy`` built says, else Horovod or the model's tf.distribute strategy). ``strategy.throughput(batch_size)`` fills both in for any
    backend. The clock runs from the epoch's start to its validation (or end) and every step
    counts as a full batch. Epoch-level hooks only, so it also runs under ParameterServerStrategy;
    the first epoch includes tracing, so compare the later ones.
    """

    def __init__(self, batch_size: int, replicas: int | None = None, workers: int | None = None) -> None:
        super().__init__()
        if batch_size <= 0:
            raise ArgumentValueError(with_fix(
                f"`batch_size` must be a positive per-replica batch size, got {batch_size}",
                "pass the batch one replica consumes per step"))
        self.batch_size = batch_size
        self.replicas = replicas
        self.workers = workers
        self._start: float | None = None
        self._stop: float | None = None
        self.history: list[float] = []

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self._start, self._stop = time.perf_counter(), None

    def on_test_begin(self, logs=None) -> None:
        if self._start is not None and self._stop is None:
            self._stop = time.perf_counter()  # validation is not training throughput

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        steps = (self.params or {}).get("steps")
        if self._start is None or not steps or logs is None:
            return
        elapsed = (self._stop or time.perf_counter()) - self._start
        replicas = self.replicas or _runtime.replicas(self.model)
        workers = self.workers or _runtime.workers(self.model)
        total = steps * self.batch_size * replicas / elapsed
        logs["examples_per_second"] = total
        logs["examples_per_second_per_worker"] = total / workers
        logs["step_time_ms"] = 1000.0 * elapsed / steps
        self.history.append(total)
