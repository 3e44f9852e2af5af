"""CPU, memory, network and GPU figures of every training task, into TensorBoard under the run.

    tb = TensorBoardRun("runs", strategy=strategy, batch_size=64)
    strategy.fit(model, x, y, callbacks=[tb, SystemMetrics(tb)])
    # runs/<run>/system/rank0/, .../rank1/ (Horovod), .../chief/ (parameter servers), .../single/

Each task writes its own folder ``<run_dir>/system/<task>/`` (never the run's main folder), with the
tags of ``tfdist.system_metrics`` at step = whole seconds since training started, so TensorBoard
draws them against time (one curve per task). ``<task>`` is ``rank<r>`` under Horovod, ``chief``,
``worker<i>`` or ``ps<i>`` in a tf.distribute cluster (under parameter servers only the chief runs
Keras callbacks), ``worker<i>`` for the other multi-process strategies and ``single`` otherwise.

Under Horovod every rank runs this callback, so the run directory must be the same on all ranks:
give ``TensorBoardRun`` a ``run_name`` (its default contains a timestamp taken on each rank).

The sampler is a daemon thread. It starts at ``on_train_begin`` and ``on_train_end`` stops it,
joins it and closes the writer. Neither tf-keras nor Keras 3 calls ``on_train_end`` when ``fit``
raises, so then the thread runs on until one of: ``close()`` (or leaving ``with SystemMetrics(...)``),
the next ``fit`` with this callback, or the end of the interpreter (an ``atexit`` hook stops every
sampler still running and flushes its events).
"""
from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any, Mapping

import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import system_metrics
from tfdist.callbacks import _runtime
from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix
from tfdist.runtime.state import current_strategy

#: The folder under the run directory that holds one sub-folder per task.
SYSTEM_FOLDER = "system"


def task_name(model: Any = None) -> str:
    """This process's folder name: ``rank<r>`` (Horovod), ``chief`` / ``worker<i>`` / ``ps<i>``
    (a tf.distribute cluster), ``worker<i>`` (other multi-process strategies), else ``single``."""
    strategy = current_strategy()
    if strategy is not None:
        if strategy.kind == "horovod":
            return f"rank{strategy.rank}"
        task_type = getattr(strategy, "task_type", None)
        if task_type:
            return _cluster_task(task_type, getattr(strategy, "task_index", 0))
        return f"worker{strategy.rank}" if strategy.num_workers > 1 else "single"
    hvd = _runtime.horovod()
    if hvd is not None:
        return f"rank{hvd.rank()}"
    resolver = getattr(getattr(model, "distribute_strategy", None), "cluster_resolver", None)
    if resolver is not None and resolver.task_type and resolver.cluster_spec().as_dict():
        return _cluster_task(resolver.task_type, resolver.task_id)
    return "single"


def _chiefs_run_dir(run_dir: str) -> str:
    """Rank 0's run directory on every Horovod rank (one broadcast; every rank runs this callback):
    a default run name holds a timestamp each rank took itself, which may differ by a second."""
    hvd = _runtime.horovod()
    if hvd is None or hvd.size() == 1:
        return run_dir
    return hvd.broadcast_object(run_dir, root_rank=0, name="tfdist.system_metrics.run_dir")


def _cluster_task(task_type: str, task_index: Any) -> str:
    return "chief" if task_type == "chief" else f"{task_type}{int(task_index or 0)}"


class SystemMetrics(tf_keras.callbacks.Callback):
    """Sample this task's CPU %, resident memory, network rates and GPUs every ``interval_s``
    seconds during ``fit`` into ``<run_dir>/system/<task>/``.

    ``run_dir_or_board``: a ``TensorBoardRun`` (its ``run_dir``) or a run directory path.
    ``task`` overrides the folder name (default: ``task_name()``, asked of the running job).
    Use on every task: each writes only its own folder (under Horovod, of rank 0's run directory,
    which every rank receives at the start of training). ``close()`` ends the sampling at once
    (also after a ``fit`` that raised); ``with SystemMetrics(...) as metrics:`` calls it.
    """

    def __init__(self, run_dir_or_board: Any, interval_s: float = system_metrics.DEFAULT_INTERVAL_S,
                 task: str | None = None) -> None:
        super().__init__()
        run_dir = getattr(run_dir_or_board, "run_dir", run_dir_or_board)
        if not isinstance(run_dir, (str, os.PathLike)):
            raise ArgumentTypeError(with_fix(
                "`run_dir_or_board` must be a TensorBoardRun or a directory path, "
                f"got {type(run_dir).__name__}",
                "pass the TensorBoardRun of the run, or e.g. 'runs/my-run'"))
        if task is not None and (not isinstance(task, str) or not task or task in (".", "..")
                                 or "/" in task or os.sep in task):
            raise ArgumentValueError(with_fix(
                f"`task` must be a folder name, got {task!r}",
                "leave it out (the job names the task) or pass e.g. task='rank0'"))
        self.run_dir = os.fspath(run_dir)
        self.interval_s = system_metrics.check_interval(interval_s)
        self.task = task
        self.log_dir: str | None = None
        self.sampler: system_metrics.SystemSampler | None = None
        self._writer: Any = None
        self._lock = threading.Lock()

    def __enter__(self) -> "SystemMetrics":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        import tensorflow as tf

        self.close()  # a sampler left running by a fit that raised
        self.run_dir = _chiefs_run_dir(self.run_dir)
        self.log_dir = os.path.join(self.run_dir, SYSTEM_FOLDER, self.task or task_name(self.model))
        self._writer = tf.summary.create_file_writer(self.log_dir)  # lazily, on the task that writes it
        self.sampler = system_metrics.SystemSampler(self._write, self.interval_s)
        _RUNNING.add(self)
        self.sampler.start()

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self.close()

    def _write(self, elapsed_s: float, wall_time: float, values: Mapping[str, float]) -> None:
        import tensorflow as tf

        with self._lock:
            if self._writer is None:
                return
            with self._writer.as_default():
                for tag, value in values.items():
                    tf.summary.scalar(tag, value, step=int(elapsed_s))

    @property
    def running(self) -> bool:
        """Whether the sampling thread is alive."""
        return self.sampler is not None and self.sampler.running

    def close(self) -> None:
        """Stop and join the sampling thread, then flush and close the writer (idempotent)."""
        if self.sampler is not None:
            self.sampler.stop()
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.flush()
            writer.close()
        _RUNNING.discard(self)


_RUNNING: "weakref.WeakSet[SystemMetrics]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """At interpreter exit, stop the samplers a failed ``fit`` left running and flush their events."""
    for callback in list(_RUNNING):
        callback.close()
