"""Examples per second, step time and wall-clock time, into the epoch logs (and so into TensorBoard)."""
from __future__ import annotations

import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist.callbacks import _runtime
from tfdist.callbacks.epoch_clock import EpochClock
from tfdist.errors import ArgumentValueError, with_fix

#: The keys ``Throughput`` adds to every epoch's logs (TensorBoard writes them as ``epoch_<key>``).
EPOCH_KEYS = ("examples_per_second", "examples_per_second_per_worker", "step_time_ms", "wall_time_s")
#: The keys it adds to the logs of ``on_train_end``: the run's summary (``TensorBoardRun`` records them).
SUMMARY_KEYS = ("mean_examples_per_second", "mean_examples_per_second_per_worker", "mean_step_time_ms")


class Throughput(tf_keras.callbacks.Callback):
    """Log ``examples_per_second`` (all workers), ``examples_per_second_per_worker``,
    ``step_time_ms`` and ``wall_time_s`` at each epoch end.

        throughput = strategy.throughput(64)
        strategy.fit(model, x, y, callbacks=[throughput, TensorBoardRun("runs")])
        throughput.mean_examples_per_second   # epochs 2.. (the first one traces the model)

    ``batch_size`` is the batch one replica consumes per step; ``replicas`` how many replicas
    step together and ``workers`` how many processes share the work (default: what the strategy
    ``make_strategy`` built says, else Horovod or the model's tf.distribute strategy).
    ``strategy.throughput(batch_size)`` fills both in for any backend. The clock runs from the
    epoch's start to its validation (or end) and every step counts as a full batch.
    ``wall_time_s`` is the time since the first ``on_train_begin`` at the epoch's end (validation
    included): time-to-accuracy curves are drawn against it.

    ``clock`` is an ``EpochClock`` to share with other callbacks that time epochs, so all of them
    time the same interval (``strategy.metrics`` shares this one's with the backend's figures).

    Every epoch is logged; the summary (``mean_*`` properties, and the ``mean_*`` keys added to
    the ``on_train_end`` logs, which ``TensorBoardRun`` records) leaves the first epoch out, which
    includes tracing and start-up, unless ``include_first_epoch=True`` or there was only one.
    Epoch-level hooks only, so it also runs under ParameterServerStrategy.
    """

    def __init__(self, batch_size: int, replicas: int | None = None, workers: int | None = None,
                 include_first_epoch: bool = False, clock: EpochClock | None = None) -> None:
        super().__init__()
        if batch_size <= 0:
            raise ArgumentValueError(with_fix(
                f"`batch_size` must be a positive per-replica batch size, got {batch_size}",
                "pass the batch one replica consumes per step"))
        if not isinstance(include_first_epoch, bool):
            raise ArgumentValueError(with_fix(
                f"`include_first_epoch` must be True or False, got {include_first_epoch!r}",
                "leave it out (False: the summary skips the tracing epoch) or pass True"))
        self.batch_size = batch_size
        self.replicas = replicas
        self.workers = workers
        self.include_first_epoch = include_first_epoch
        self.clock = clock if clock is not None else EpochClock()  # one per callback unless shared
        self.history: list[float] = []  # examples/s of every epoch, the first included
        self.step_times_ms: list[float] = []
        self._workers_seen = 1

    def on_train_begin(self, logs=None) -> None:
        self.clock.train_begin()  # the first only: an elastic fit calls fit per epoch

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self.clock.epoch_begin()

    def on_test_begin(self, logs=None) -> None:
        self.clock.test_begin()  # validation is not training throughput

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        elapsed = self.clock.epoch_end()
        steps = (self.params or {}).get("steps")
        if elapsed is None or not steps or logs is None:
            return
        replicas = self.replicas or _runtime.replicas(self.model)
        self._workers_seen = self.workers or _runtime.workers(self.model)
        total = steps * self.batch_size * replicas / elapsed
        logs["examples_per_second"] = total
        logs["examples_per_second_per_worker"] = total / self._workers_seen
        logs["step_time_ms"] = 1000.0 * elapsed / steps
        if self.clock.wall_time is not None:
            logs["wall_time_s"] = self.clock.wall_time
        self.history.append(total)
        self.step_times_ms.append(1000.0 * elapsed / steps)

    def _summarised(self, values: list[float]) -> list[float]:
        return values if self.include_first_epoch or len(values) < 2 else values[1:]

    @property
    def mean_examples_per_second(self) -> float | None:
        """Mean examples/s over the epochs the summary counts; ``None`` before the first epoch."""
        values = self._summarised(self.history)
        return sum(values) / len(values) if values else None

    @property
    def mean_step_time_ms(self) -> float | None:
        """Mean step time (ms) over the epochs the summary counts; ``None`` before the first epoch."""
        values = self._summarised(self.step_times_ms)
        return sum(values) / len(values) if values else None

    def summary(self) -> dict[str, float]:
        """``mean_examples_per_second``, ``mean_examples_per_second_per_worker``, ``mean_step_time_ms``
        (empty before the first epoch)."""
        rate = self.mean_examples_per_second
        if rate is None:
            return {}
        return {"mean_examples_per_second": rate,
                "mean_examples_per_second_per_worker": rate / self._workers_seen,
                "mean_step_time_ms": self.mean_step_time_ms}

    def on_train_end(self, logs=None) -> None:
        if logs is not None:
            logs.update(self.summary())
