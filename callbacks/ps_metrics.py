"""What a parameter-server step costs beyond its compute, and each worker's share of the steps.

    strategy.fit(model, x, y, batch_size=64, callbacks=[*strategy.metrics(64), TensorBoardRun("runs")])
    # strategy.metrics(64): Throughput, ParameterServerMetrics(64), the progress line

``ParameterServerMetrics`` is the parameter-server counterpart of ``WorkerMetrics``
(``tfdist.callbacks.worker_metrics``): the coordinator's time per step against the compute of one
step timed locally on the chief (``coordinator_step_ms``, ``local_compute_ms``,
``non_compute_share``), and per worker the steps it ran and their time. tf-keras' ``fit`` hands
each step to whichever worker is free (``ClusterCoordinator.schedule``); the coordinator runs every
worker's steps from a thread of its own, and tfdist times each step there
(``tfdist.upstream.time_closures``: no public API names the worker that ran a step).

The keys it added last are its ``logged_keys`` (``strategy.metrics`` keeps them off the progress
line); its epoch clock is an ``EpochClock`` (``tfdist.callbacks.epoch_clock``).
"""
from __future__ import annotations

import functools
import logging
import math
import threading
import time
from typing import Any, Callable

import tensorflow as tf
import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import keras_compat, upstream
from tfdist.callbacks import _runtime
from tfdist.callbacks.epoch_clock import EpochClock
from tfdist.errors import ArgumentValueError, with_fix


def _in_thread(function: Callable[[], Any]) -> Any:
    """``function()`` in a new thread, outside the tf.distribute scope ``fit`` holds in this one
    (the scope is per thread), so its variables are local and its ops touch no ps task."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = function()
        except BaseException as exc:  # handed to the caller
            result["error"] = exc

    thread = threading.Thread(target=run, name="tfdist-local-compute")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


class ParameterServerMetrics(tf_keras.callbacks.Callback):
    """What a parameter-server step costs beyond its compute, measured on the coordinator (chief).

    Per-epoch keys:

    | key                   | what                                                                  |
    |-----------------------|-----------------------------------------------------------------------|
    | ``coordinator_step_ms`` | the coordinator's wall time per step (epoch start to validation / steps): |
    |                       | with N workers stepping at once, each worker takes about N times this  |
    | ``local_compute_ms``  | forward and backward pass of one ``batch_size`` batch of zeros through a |
    |                       | local copy of the model on the chief: no ps traffic, no update, and a    |
    |                       | surrogate loss (the sum of the outputs); median of ``repeats`` runs      |
    | ``non_compute_share`` | ``1 - local_compute_ms / (coordinator_step_ms * workers)``: the share of |
    |                       | a worker's time per step not explained by compute (variable reads and    |
    |                       | updates on the ps tasks, dispatch, waiting), if every worker stays busy; |
    |                       | below 0 when they do not (the coordinator is the bottleneck)             |

    Per worker ``i`` (the worker tasks, 0 first): ``worker/<i>/steps`` it ran this epoch (training
    steps only: fit's validation steps, which the coordinator also hands out, are not counted),
    ``worker/<i>/step_time_ms`` (its time per step from dispatch to result, timed by the coordinator's
    thread for that worker), ``worker/<i>/examples_per_second``, and ``worker_step_time_spread``
    (slowest / fastest): steps go to whichever worker is free, so a slow worker runs fewer, slower steps.
    A worker on the chief's host (not every worker there) also gets ``worker/<i>/rest_compute_ms``:
    ``local_compute_ms``, timed on that host with the coordinator idle; its step time holds the
    coordinator's dispatch beside it, which a ring would not (``tfdist.adapt.refit.speeds_at_rest``).

    The compute is timed on the chief's processor, which may differ from the workers'. Epoch-level
    hooks only, as parameter servers require. Needs a model with known input shapes (``Sequential`` with ``Input``
    or functional). Parameter servers only: elsewhere it refuses to run. ``clock`` is an
    ``EpochClock`` shared with other callbacks (``strategy.metrics`` shares ``Throughput``'s).
    ``optional=True`` (what ``strategy.fit`` adds on its own, for an adaptive run) measures nothing,
    with one warning, for a model whose input shape it cannot know, where the default refuses it.
    """

    def __init__(self, batch_size: int, repeats: int = 5, clock: EpochClock | None = None,
                 optional: bool = False) -> None:
        super().__init__()
        for name, value in (("batch_size", batch_size), ("repeats", repeats)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ArgumentValueError(with_fix(f"`{name}` must be a positive integer, got {value!r}",
                                                  "pass the per-worker batch" if name == "batch_size"
                                                  else "leave repeats at 5"))
        self.batch_size = batch_size
        self.repeats = repeats
        self.optional = optional
        self._step: Callable[[], Any] | None = None
        self.clock = clock if clock is not None else EpochClock()
        self.logged_keys: frozenset[str] = frozenset()  # what the last on_epoch_end added to the logs
        self._workers = _ClosureTimes()
        self._trained: dict[int, tuple[int, float]] | None = None  # the counts as validation began
        self._beside_chief: frozenset[int] = frozenset()

    def _build_local_step(self) -> Callable[[], Any]:
        model = self.model
        keras = keras_compat.keras_of(model, "model")
        shape = getattr(model, "input_shape", None)
        if not isinstance(shape, tuple) or any(d is None for d in shape[1:]):
            raise ArgumentValueError(with_fix(
                f"ParameterServerMetrics needs the model's input shape to time its compute, and "
                f"{model.name} has input_shape={shape!r}",
                "build the model with keras.Input(shape=...) (Sequential or functional)"))
        local = keras.models.clone_model(model)
        inputs = tf.zeros((self.batch_size, *shape[1:]), dtype=model.inputs[0].dtype)

        @tf.function
        def step() -> Any:
            with tf.GradientTape() as tape:
                outputs = local(inputs, training=True)
                loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in tf.nest.flatten(outputs)])
            return tape.gradient(loss, local.trainable_variables)

        tf.nest.map_structure(lambda t: t.numpy(), step())  # trace once, before any timing
        return step

    def _time_local_step(self) -> float:
        durations = []
        for _ in range(self.repeats):
            start = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), self._step())
            durations.append(1000.0 * (time.perf_counter() - start))
        return sorted(durations)[len(durations) // 2]

    def on_train_begin(self, logs=None) -> None:
        strategy = getattr(self.model, "distribute_strategy", None)
        if not isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
            raise ArgumentValueError(with_fix(
                "ParameterServerMetrics measures a parameter-server job, and this model trains under "
                f"{type(strategy).__name__}",
                "use it with make_strategy('parameter_server'); WorkerMetrics measures Horovod jobs"))
        self._step = self._local_step()
        self._beside_chief = _runtime.workers_beside_chief(self.model)
        if self._step is not None:
            self._workers.start(tf.distribute.experimental.coordinator.ClusterCoordinator(strategy))
        self.clock.train_begin()

    def _local_step(self) -> Callable[[], Any] | None:
        """The local compute step; None (one warning) when ``optional`` and the model's input shape is
        unknown (a subclassed model), whose per-worker figures are then not measured."""
        try:
            return _in_thread(self._build_local_step)
        except ArgumentValueError as exc:
            if not self.optional:
                raise
            logging.getLogger("tfdist").warning("tfdist: no per-worker figures for this parameter-server run "
                                                "(%s)", exc)
            return None

    def on_train_end(self, logs=None) -> None:
        self._workers.stop()

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self.clock.epoch_begin()
        self._workers.reset()
        self._trained = None

    def on_test_begin(self, logs=None) -> None:
        self.clock.test_begin()  # validation is not a training step
        if self._trained is None:  # fit has joined the epoch's training steps; validation's come next
            self._trained = self._workers.read()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        seconds = self.clock.epoch_end()
        steps = (self.params or {}).get("steps")
        if seconds is None or not steps or logs is None or self._step is None:
            return
        step_ms = 1000.0 * seconds / steps
        compute_ms = _in_thread(self._time_local_step)
        counts = self._trained if self._trained is not None else self._workers.read()
        added = {**parameter_server_logs(step_ms, compute_ms, _runtime.workers(self.model)),
                 **per_worker_logs(counts, _steps_per_closure(self.model), self.batch_size, seconds),
                 **{f"worker/{index}/rest_compute_ms": compute_ms for index in sorted(self._beside_chief)}}
        logs.update(added)
        self.logged_keys = frozenset(added)


class _ClosureTimes:
    """Steps (closures) each worker ran and their time, counted by the coordinator's worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[int, list[float]] = {}  # worker index -> [closures, seconds, in flight]
        self._undo: list[Callable[[], Any]] = []

    def start(self, coordinator: Any) -> None:
        self.stop()
        for worker in upstream.coordinator_workers(coordinator):
            index = worker.worker_index
            self._counts[index] = [0, 0.0, 0]
            self._undo.append(upstream.time_closures(worker, functools.partial(self._record, index)))

    def _record(self, index: int, seconds: float) -> None:
        with self._lock:
            counts = self._counts[index]
            counts[0] += 1
            counts[1] += seconds

    def reset(self) -> None:
        with self._lock:
            for counts in self._counts.values():
                counts[0], counts[1] = 0, 0.0

    def read(self, settle_s: float = 1.0) -> dict[int, tuple[int, float]]:
        """``{worker: (closures, seconds)}`` so far this epoch. ``fit`` has joined the coordinator by
        the epoch's end; a closure's time is recorded just after it is marked finished, so wait up
        to ``settle_s`` for the counts to stop moving."""
        deadline, last = time.monotonic() + settle_s, None
        while True:
            with self._lock:
                now = {index: (int(c[0]), c[1]) for index, c in self._counts.items()}
            if now == last or time.monotonic() >= deadline:
                return now
            last = now
            time.sleep(0.01)

    def stop(self) -> None:
        for undo in self._undo:
            undo()
        self._undo, self._counts = [], {}


def _steps_per_closure(model: Any) -> int:
    """Training steps in one scheduled closure: the model's steps per execution under tf-keras' ``fit``,
    one in tfdist's loop, which schedules each step itself: a custom loop (``strategy.callbacks``, whose
    model is never compiled) and a Keras 3 model's ``fit`` (tfdist.strategies.keras3_parameter_server)."""
    if keras_compat.flavour_of(model) == keras_compat.KERAS_3:
        return 1
    steps = upstream.steps_per_execution_if_compiled(model)
    return 1 if steps is None else steps


def per_worker_logs(counts: dict[int, tuple[int, float]], steps_per_closure: int, batch_size: int,
                    epoch_seconds: float) -> dict[str, float]:
    """``worker/<i>/steps``, ``.../step_time_ms`` (its time per step, dispatch to result, as the
    coordinator sees it), ``.../examples_per_second`` and ``worker_step_time_spread`` (slowest /
    fastest step time of the workers that ran any): an asynchronous straggler runs fewer, slower steps."""
    logs: dict[str, float] = {}
    times = []
    for index in sorted(counts):
        closures, seconds = counts[index]
        steps = closures * steps_per_closure
        logs[f"worker/{index}/steps"] = float(steps)
        step_ms = 1000.0 * seconds / steps if steps else math.nan
        logs[f"worker/{index}/step_time_ms"] = step_ms
        logs[f"worker/{index}/examples_per_second"] = steps * batch_size / epoch_seconds if epoch_seconds > 0 else math.nan
        if steps:
            times.append(step_ms)
    logs["worker_step_time_spread"] = max(times) / min(times) if times and min(times) > 0 else math.nan
    return logs


def parameter_server_logs(step_ms: float, compute_ms: float, workers: int) -> dict[str, float]:
    """The epoch keys of ``ParameterServerMetrics`` from its two measurements."""
    share = 1.0 - compute_ms / (step_ms * workers) if step_ms > 0 and workers > 0 else math.nan
    return {"coordinator_step_ms": step_ms, "local_compute_ms": compute_ms, "non_compute_share": share}
