"""Every Horovod worker's step time, and the time its steps wait in the gradient allreduce.

    strategy.fit(model, x, y, batch_size=64, callbacks=[
        strategy.throughput(64), WorkerMetrics(64), TensorBoardRun("runs", strategy=strategy)])

At each epoch end every rank contributes its own figures to one Horovod allgather (every rank
calls it, once per epoch, so the collectives pair up); each rank then adds to its epoch logs, and
the chief's TensorBoard writes (``<rank>`` for every rank, 0 first):

| key                                   | what                                                         |
|---------------------------------------|--------------------------------------------------------------|
| ``worker/<rank>/step_time_ms``        | the rank's wall time per step (epoch start to validation)     |
| ``worker/<rank>/examples_per_second`` | the examples the rank trained on per second of that time      |
| ``worker/<rank>/comm_time_ms``        | its mean time per step in the gradient exchange (see below)   |
| ``worker/<rank>/compute_time_ms``     | ``step_time_ms - comm_time_ms``: the rank's own work per step  |
| ``worker_step_time_spread``           | slowest / fastest ``compute_time_ms`` (1.0 even, > 1 a straggler) |
| ``comm_time_ms``, ``comm_share``      | this rank's ``comm_time_ms``, and it over its ``step_time_ms`` |

Synchronous training makes every rank wait for the slowest in each step's allreduce, so the wall
step times are the same on every rank by construction; the straggler is the rank that waits
least, which is why the spread compares ``compute_time_ms``.

``comm_time_ms`` is timed inside the traced train step with ``tf.timestamp``: from the moment all
of the step's gradients exist (the allreduce is held until then by an identity op per gradient)
to the moment the updated weights can be read. It is the gradient allreduce as the step sees it,
waiting for slower ranks included, plus the optimizer's update of the weights (a few elementwise
ops per variable). The optimizer (tf-keras: ``minimize``; Keras 3: ``apply``, which tfdist makes
allreduce first) is wrapped at the start of ``fit`` and restored at its end; a train step traced
by an earlier ``fit``, or a custom ``train_step`` that calls neither, has no marks, and then the
comm figures are NaN. Cost per step: two
timestamps, an identity per gradient, a read per variable and two variable updates; per epoch:
one allgather of 3 numbers per rank.

Put it after ``MetricAverage`` (``strategy.fit`` puts its own first), so the chief's view stays
its own, and before ``TensorBoardRun``. Horovod only: elsewhere it refuses to run.

``ParameterServerMetrics`` is the parameter-server counterpart: the coordinator's time per step
against the compute of one step timed locally on the chief (``coordinator_step_ms``,
``local_compute_ms``, ``non_compute_share``), and per worker the steps it ran and their time.
tf-keras' ``fit`` hands each step to whichever worker is free (``ClusterCoordinator.schedule``); the
coordinator runs every worker's steps from a thread of its own, and tfdist times each step there
(``tfdist.upstream.time_closures``: no public API names the worker that ran a step).
"""
from __future__ import annotations

import functools
import math
import threading
import time
from typing import Any, Callable

import tensorflow as tf
import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import keras_compat, upstream
from tfdist.callbacks import _runtime
from tfdist.errors import ArgumentValueError, with_fix


def worker_logs(gathered: list[list[float]]) -> dict[str, float]:
    """The per-worker keys and the spread from one row ``[step_time_ms, comm_time_ms,
    examples_per_second]`` per rank, rank 0 first."""
    logs: dict[str, float] = {}
    compute = []
    for rank, (step_ms, comm_ms, rate) in enumerate(gathered):
        logs[f"worker/{rank}/step_time_ms"] = step_ms
        logs[f"worker/{rank}/examples_per_second"] = rate
        logs[f"worker/{rank}/comm_time_ms"] = comm_ms
        logs[f"worker/{rank}/compute_time_ms"] = own = step_ms - comm_ms
        compute.append(own)
    fastest = min(compute) if compute else math.nan
    logs["worker_step_time_spread"] = max(compute) / fastest if fastest > 0 else math.nan
    return logs


def _stamped(grads: Any) -> tuple[Any, tf.Tensor]:
    """``(grads, t)``: ``t`` is stamped once every gradient exists, and the gradients handed on wait
    for it, so the allreduce that consumes them cannot start before the clock does."""
    flat = tf.nest.flatten(grads)
    with tf.control_dependencies([g for g in flat if g is not None]):
        start = tf.timestamp()
    with tf.control_dependencies([start]):
        flat = [g if g is None or isinstance(g, tf.IndexedSlices) else tf.identity(g) for g in flat]
    return tf.nest.pack_sequence_as(grads, flat), start


def _read_after_update(variables: Any) -> list:
    """Reads of ``variables``: a tf.function orders them after the updates of the same variables,
    so what depends on them waits for the update (an ``iterations`` read does not: it is its own
    variable)."""
    return [tf.identity(tf.convert_to_tensor(v)) for v in tf.nest.flatten(variables)]


class _TimedTape:
    """A GradientTape stand-in whose ``gradient`` stamps the time its results exist."""

    def __init__(self, tape: Any, marks: list) -> None:
        self._tape, self._marks = tape, marks

    def __enter__(self) -> Any:
        return self._tape.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._tape.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tape, name)

    def gradient(self, *args: Any, **kwargs: Any) -> Any:
        grads, start = _stamped(self._tape.gradient(*args, **kwargs))
        self._marks.append(start)
        return grads


class WorkerMetrics(tf_keras.callbacks.Callback):
    """Per-worker step times, allreduce time and the straggler spread, gathered at each epoch end
    (see the module docstring for the keys). ``batch_size`` is the per-rank batch."""

    def __init__(self, batch_size: int) -> None:
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ArgumentValueError(with_fix(
                f"`batch_size` must be a positive integer, got {batch_size!r}",
                "pass the batch one rank consumes per step"))
        self.batch_size = batch_size
        self._seconds: tf.Variable | None = None
        self._count: tf.Variable | None = None
        self._restore: Callable[[], None] | None = None
        self._start: float | None = None
        self._stop: float | None = None
        self.gathered: list[list[list[float]]] = []  # per epoch: one [step, comm, rate] row per rank

    # --- instrumentation ----------------------------------------------------------------------
    def _add(self, start: tf.Tensor, after: list) -> None:
        with tf.control_dependencies([start, *after]):
            end = tf.timestamp()
        self._seconds.assign_add(tf.maximum(end - start, 0.0))
        self._count.assign_add(1)

    def _instrument(self, optimizer: Any) -> None:
        """Wrap the optimizer method that allreduces and updates (see the module docstring)."""
        keras_3 = keras_compat.flavour_of(optimizer) == keras_compat.KERAS_3
        name = "apply" if keras_3 else "minimize"
        original = getattr(optimizer, name)
        had_own, previous = name in vars(optimizer), vars(optimizer).get(name)

        if keras_3:
            def timed(grads: Any, trainable_variables: Any = None) -> Any:
                grads, start = _stamped(list(grads))
                result = original(grads, trainable_variables)
                variables = trainable_variables if trainable_variables is not None else optimizer.variables
                self._add(start, _read_after_update(variables))
                return result
        else:
            def timed(loss: Any, var_list: Any, tape: Any = None) -> Any:
                if tape is None:  # a callable loss: no tape to mark the end of the backward pass
                    return original(loss, var_list, tape=tape)
                marks: list = []
                result = original(loss, var_list, tape=_TimedTape(tape, marks))
                if marks:
                    self._add(marks[-1], _read_after_update(var_list))
                return result

        setattr(optimizer, name, timed)

        def restore() -> None:
            if had_own:
                setattr(optimizer, name, previous)
            else:
                delattr(optimizer, name)

        self._restore = restore

    # --- hooks ----------------------------------------------------------------------------------
    def on_train_begin(self, logs=None) -> None:
        if _runtime.horovod() is None:
            raise ArgumentValueError(with_fix(
                "WorkerMetrics gathers figures from Horovod ranks, and Horovod is not running in this "
                "process",
                "use it with make_strategy('horovod') under horovodrun; Throughput measures any backend"))
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            raise ArgumentValueError(with_fix("WorkerMetrics needs a compiled model",
                                              "compile the model before fit"))
        self._seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="tfdist_comm_seconds")
        self._count = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfdist_comm_steps")
        self.gathered = []
        self._instrument(optimizer)

    def on_train_end(self, logs=None) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self._start, self._stop = time.perf_counter(), None
        if self._seconds is not None:
            self._seconds.assign(0.0)
            self._count.assign(0)

    def on_test_begin(self, logs=None) -> None:
        if self._start is not None and self._stop is None:
            self._stop = time.perf_counter()  # validation is not a training step

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        hvd = _runtime.horovod()
        steps = (self.params or {}).get("steps")
        if hvd is None or self._start is None or not steps:
            return
        elapsed = (self._stop or time.perf_counter()) - self._start
        timed = int(self._count.numpy())
        comm_ms = 1000.0 * float(self._seconds.numpy()) / timed if timed else math.nan
        mine = [1000.0 * elapsed / steps, comm_ms, steps * self.batch_size / elapsed]
        rows = hvd.allgather(tf.constant([mine], dtype=tf.float64), name="tfdist.worker_metrics")
        rows = rows.numpy().tolist()
        self.gathered.append(rows)
        if logs is not None:
            logs.update(worker_logs(rows))
            logs["comm_time_ms"] = comm_ms
            logs["comm_share"] = comm_ms / mine[0]


def _in_thread(function: Callable[[], Any]) -> Any:
    """``function()`` in a new thread, outside the tf.distribute scope ``fit`` holds in this one
    (the scope is per thread), so its variables are local and its ops touch no ps task."""
    import threading

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

    Per worker ``i`` (the worker tasks, 0 first): ``worker/<i>/steps`` it ran this epoch,
    ``worker/<i>/step_time_ms`` (its time per step from dispatch to result, timed by the coordinator's
    thread for that worker), ``worker/<i>/examples_per_second``, and ``worker_step_time_spread``
    (slowest / fastest): steps go to whichever worker is free, so a slow worker runs fewer, slower steps.

    The compute is timed on the chief's processor, which may differ from the workers'. Epoch-level
    hooks only, as parameter servers require. Needs a model with known input shapes (``Sequential`` with ``Input``
    or functional). Parameter servers only: elsewhere it refuses to run.
    """

    def __init__(self, batch_size: int, repeats: int = 5) -> None:
        super().__init__()
        for name, value in (("batch_size", batch_size), ("repeats", repeats)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ArgumentValueError(with_fix(f"`{name}` must be a positive integer, got {value!r}",
                                                  "pass the per-worker batch" if name == "batch_size"
                                                  else "leave repeats at 5"))
        self.batch_size = batch_size
        self.repeats = repeats
        self._step: Callable[[], Any] | None = None
        self._start: float | None = None
        self._stop: float | None = None
        self._workers = _ClosureTimes()

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
        self._step = _in_thread(self._build_local_step)
        self._workers.start(tf.distribute.experimental.coordinator.ClusterCoordinator(strategy))

    def on_train_end(self, logs=None) -> None:
        self._workers.stop()

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self._start, self._stop = time.perf_counter(), None
        self._workers.reset()

    def on_test_begin(self, logs=None) -> None:
        if self._start is not None and self._stop is None:
            self._stop = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        steps = (self.params or {}).get("steps")
        if self._start is None or not steps or logs is None or self._step is None:
            return
        seconds = (self._stop or time.perf_counter()) - self._start
        step_ms = 1000.0 * seconds / steps
        compute_ms = _in_thread(self._time_local_step)
        logs.update(parameter_server_logs(step_ms, compute_ms, _runtime.workers(self.model)))
        logs.update(per_worker_logs(self._workers.read(), _steps_per_closure(self.model), self.batch_size, seconds))


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
    """Training steps in one scheduled closure (the model's steps per execution)."""
    return upstream.steps_per_execution(model)


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
