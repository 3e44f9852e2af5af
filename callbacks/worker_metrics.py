"""Every worker's step time, and the time its steps wait in the gradient allreduce (Horovod, and
MultiWorkerMirrored through its strategy).

    strategy.fit(model, x, y, batch_size=64, callbacks=[
        *strategy.metrics(64), TensorBoardRun("runs", strategy=strategy)])
    # strategy.metrics(64): Throughput, WorkerMetrics(64) on its clock, the progress line

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
| ``worker/<rank>/link_bytes_per_step`` | the bytes its host's links carried per training step (sent and received, loopback left out: ``/proc/net/dev``; NaN elsewhere) |
| ``worker/<rank>/peak_memory_mb``      | the rank's peak resident memory so far, MB (10^6 bytes; NaN off Linux) |

Synchronous training makes every rank wait for the slowest in each step's allreduce, so the wall
step times are the same on every rank by construction; the straggler is the rank that waits
least, which is why the spread compares ``compute_time_ms``.

``comm_time_ms`` is timed inside the traced train step with ``tf.timestamp``: from the moment all
of the step's gradients exist (the allreduce is held until then by an identity op per gradient)
to the moment the updated weights can be read. It is the gradient allreduce as the step sees it,
waiting for slower ranks included, plus the optimizer's update of the weights (a few elementwise
ops per variable). The optimizer (tf-keras: ``minimize``, in a custom loop ``apply_gradients``; Keras 3:
``apply``, which tfdist makes allreduce first) is wrapped at the start of training and restored at its end; a train step traced
by an earlier ``fit``, or a custom ``train_step`` that calls neither, has no marks, and then the
comm figures are NaN. Cost per step: two timestamps, an identity per gradient, a read per variable
and two variable updates; per epoch: one allgather of 5 numbers per rank.

Under MultiWorkerMirrored, ``strategy.metrics`` of that strategy passes ``gather``, its own all-gather,
in place of Horovod's. The counters are variables synchronised on read (each replica adds to its own
copy), read per worker without a collective. A worker slow outside its train step there (its input,
the loop, its callbacks) makes the others wait at the next step's start, in the distributed
iterator's all-reduce, which this window does not time: that reads as every worker's compute, not as
a straggler. A worker slow in its forward and backward pass shows as under Horovod.

Put it after ``MetricAverage`` (``strategy.fit`` puts its own first), so the chief's view stays
its own, and before ``TensorBoardRun``. Horovod, or MultiWorkerMirrored through its strategy:
elsewhere it refuses to run. Under XLA (``jit_compile=True``), which has no kernel for
``tf.timestamp``, nothing is timed: the comm and compute figures, the share and the spread are NaN. The keys it
added last are its ``logged_keys``: ``strategy.metrics`` keeps them off the progress line
(``tfdist.callbacks.progress``), and the epoch clock is ``tfdist.callbacks.epoch_clock``'s.
``ParameterServerMetrics`` (``tfdist.callbacks.ps_metrics``) is the parameter-server counterpart.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import tensorflow as tf
import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import keras_compat, system_metrics, upstream
from tfdist.callbacks import _runtime
from tfdist.callbacks.epoch_clock import EpochClock
from tfdist.errors import ArgumentValueError, with_fix


def worker_logs(gathered: list[list[float]]) -> dict[str, float]:
    """The per-worker keys and the spread from one row ``[step_time_ms, comm_time_ms,
    examples_per_second, link_bytes_per_step, peak_memory_bytes]`` per rank, rank 0 first (the last
    two, NaN where unmeasured, may be left out)."""
    logs: dict[str, float] = {}
    compute = []
    for rank, row in enumerate(gathered):
        step_ms, comm_ms, rate = row[:3]
        logs[f"worker/{rank}/step_time_ms"] = step_ms
        logs[f"worker/{rank}/examples_per_second"] = rate
        logs[f"worker/{rank}/comm_time_ms"] = comm_ms
        logs[f"worker/{rank}/compute_time_ms"] = own = step_ms - comm_ms
        if len(row) >= 5:
            logs[f"worker/{rank}/link_bytes_per_step"] = row[3]
            logs[f"worker/{rank}/peak_memory_mb"] = row[4] / 1e6
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
    (see the module docstring for the keys). ``batch_size`` is the per-rank batch; ``clock`` an
    ``EpochClock`` shared with other callbacks (``strategy.metrics`` shares ``Throughput``'s)."""

    def __init__(self, batch_size: int, clock: EpochClock | None = None,
                 gather: Callable[[list[float]], list[list[float]]] | None = None) -> None:
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ArgumentValueError(with_fix(
                f"`batch_size` must be a positive integer, got {batch_size!r}",
                "pass the batch one rank consumes per step"))
        self.batch_size = batch_size
        self._gather = gather
        self._replicas: Any = None  # the tf.distribute strategy the two variables below were made in
        self._seconds: tf.Variable | None = None
        self._count: tf.Variable | None = None
        self._restore: Callable[[], None] | None = None
        self.clock = clock if clock is not None else EpochClock()
        self.logged_keys: frozenset[str] = frozenset()  # what the last on_epoch_end added to the logs
        self.gathered: list[list[list[float]]] = []  # per epoch: one row per rank (see worker_logs)
        self._link_start: int | None = None  # the host's link counters at the epoch's start
        self._link_trained: int | None = None  # ... and as its training steps ended (validation after)

    # --- instrumentation ----------------------------------------------------------------------
    def _add(self, start: tf.Tensor, after: list) -> None:
        with tf.control_dependencies([start, *after]):
            end = tf.timestamp()
        self._seconds.assign_add(tf.maximum(end - start, 0.0))
        self._count.assign_add(1)

    def _instrument(self, optimizer: Any) -> None:
        """Wrap the optimizer method that allreduces and updates (see the module docstring); a tf-keras
        custom loop's model, never compiled, applies its gradients with ``apply_gradients``."""
        keras_3 = keras_compat.flavour_of(optimizer) == keras_compat.KERAS_3
        in_loop = not keras_3 and upstream.steps_per_execution_if_compiled(self.model) is None
        name = "apply" if keras_3 else "apply_gradients" if in_loop else "minimize"
        original = getattr(optimizer, name)
        had_own, previous = name in vars(optimizer), vars(optimizer).get(name)

        if in_loop:
            def timed(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
                pairs = list(grads_and_vars)
                grads, start = _stamped([grad for grad, _ in pairs])
                variables = [variable for _, variable in pairs]
                result = original(list(zip(grads, variables)), *args, **kwargs)
                self._add(start, _read_after_update(variables))
                return result
        elif keras_3:
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

    def _rows(self, mine: list[float]) -> list[list[float]] | None:
        """Every worker's row, first worker first: through the backend's own gather (``gather``), else
        one Horovod allgather; None without either."""
        if self._gather is not None:
            return self._gather(mine)
        hvd = _runtime.horovod()
        if hvd is None:
            return None
        return hvd.allgather(tf.constant([mine], dtype=tf.float64), name="tfdist.worker_metrics").numpy().tolist()

    def _here(self, variable: tf.Variable) -> float:
        """This worker's own value of ``variable``: each of its replicas adds to its own copy (a
        variable synchronised on read, under tf.distribute), summed here without a collective."""
        return float(sum(part.numpy() for part in self._replicas.experimental_local_results(variable)))

    def _link_per_step(self, steps: int) -> float:
        """The bytes this host's links carried per training step of the epoch (NaN where unread)."""
        end = self._link_trained if self._link_trained is not None else system_metrics.link_bytes()
        if self._link_start is None or end is None or end < self._link_start:
            return math.nan
        return (end - self._link_start) / steps

    # --- hooks ----------------------------------------------------------------------------------
    def on_train_begin(self, logs=None) -> None:
        if self._gather is None and _runtime.horovod() is None:
            raise ArgumentValueError(with_fix(
                "WorkerMetrics gathers figures from Horovod ranks, and Horovod is not running in this "
                "process",
                "use it with make_strategy('horovod') under horovodrun (or take strategy.metrics(...) of a "
                "multi_worker_mirrored strategy, which gathers through its own collectives); Throughput "
                "measures any backend"))
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            raise ArgumentValueError(with_fix("WorkerMetrics needs a compiled model",
                                              "compile the model before fit"))
        self.close()  # a fit that raised outside strategy.fit left its timing on the optimizer
        self._replicas = getattr(self.model, "distribute_strategy", None) or tf.distribute.get_strategy()
        self.gathered = []
        if getattr(self.model, "jit_compile", None) is True:  # XLA has no tf.timestamp: nothing is timed
            self._seconds = self._count = None
        else:
            own = {"trainable": False, "synchronization": tf.VariableSynchronization.ON_READ,
                   "aggregation": tf.VariableAggregation.NONE}
            with self._replicas.scope():  # Keras 3 calls this outside the model's strategy scope, tf-keras inside
                self._seconds = tf.Variable(0.0, dtype=tf.float64, name="tfdist_comm_seconds", **own)
                self._count = tf.Variable(0, dtype=tf.int64, name="tfdist_comm_steps", **own)
            self._instrument(optimizer)
        self.clock.train_begin()

    def on_train_end(self, logs=None) -> None:
        self.close()

    def close(self) -> None:
        """Give the optimizer its own method back (``on_train_end``; ``strategy.fit`` calls it when fit
        raises, which Keras does not tell callbacks)."""
        if self._restore is not None:
            self._restore()
            self._restore = None

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self.clock.epoch_begin()
        self._link_start, self._link_trained = system_metrics.link_bytes(), None
        if self._seconds is not None:
            for variable in (self._seconds, self._count):
                for part in self._replicas.experimental_local_results(variable):
                    part.assign(tf.zeros_like(part))

    def on_test_begin(self, logs=None) -> None:
        self.clock.test_begin()  # validation is not a training step
        if self._link_trained is None:
            self._link_trained = system_metrics.link_bytes()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        elapsed = self.clock.epoch_end()
        steps = (self.params or {}).get("steps")
        if elapsed is None or not steps:
            return
        timed = int(self._here(self._count)) if self._count is not None else 0
        comm_ms = 1000.0 * self._here(self._seconds) / timed if timed else math.nan
        mine = [1000.0 * elapsed / steps, comm_ms, steps * self.batch_size / elapsed,
                self._link_per_step(steps), float(system_metrics.peak_memory_bytes() or math.nan)]
        rows = self._rows(mine)
        if rows is None:
            return
        self.gathered.append(rows)
        if logs is not None:
            added = {**worker_logs(rows), "comm_time_ms": comm_ms, "comm_share": comm_ms / mine[0]}
            logs.update(added)
            self.logged_keys = frozenset(added)
