"""Keras 3's ``fit`` and ``evaluate`` under MultiWorkerMirroredStrategy, which Keras 3 alone cannot run
(keras-team/keras#20585, tensorflow/tensorflow#72388).

Two steps of Keras 3's TensorFlow trainer (keras/src/backend/tensorflow/trainer.py) fail once the
strategy has more than one worker:

1. ``_maybe_symbolic_build`` reduces the whole first ``(x, y)`` batch with one eager
   ``strategy.reduce``, which takes one value: "Attempt to convert a value (PerReplica...) with an
   unsupported type". ``tfdist.upstream.build_keras3_from_a_local_batch`` builds from this worker's
   batch instead (the build needs only shapes and dtypes).
2. Each step's logs go through ``reduce_per_replica(..., reduction="auto")``, which for a multi-worker
   strategy is ``strategy.reduce("MEAN", value, axis=0)``: a scalar log has no axis 0 ("Invalid
   reduction dimension 0 for input with 0 dimensions"). The model's ``train_step`` and ``test_step``
   are wrapped on the instance (Keras' documented place to change a step) to return each log with a
   leading axis of length 1, so the MEAN over axis 0 of the replicas' values is their mean, in the
   log's own shape.

The gradients are untouched: Keras 3's optimizer sums them across the replicas, as under
MirroredStrategy. Keras 3's ``BackupAndRestore`` has no notion of a chief, so every worker wrote the
same ``latest.weights.h5`` at once (h5py: "unable to lock file"); ``worker_backups`` lets the chief
write it and the other workers read it and write a throwaway copy (``WorkerBackup``), as tf-keras does.
Importing this module does not import TensorFlow.
"""
from __future__ import annotations

from typing import Any, Callable

from tfdist import keras_compat, upstream

#: Set on a model ``prepare`` changed, so a second ``fit`` does not wrap its steps again.
PREPARED = "_tfdist_keras3_multi_worker"


def prepare(model: Any) -> bool:
    """Make a compiled Keras 3 ``model``'s ``fit`` and ``evaluate`` run under MultiWorkerMirroredStrategy
    (once per model); a tf-keras model is left as it is. Whether the model is Keras 3's."""
    if keras_compat.flavour_of(model) != keras_compat.KERAS_3:
        return False
    if getattr(model, PREPARED, False):
        return True
    upstream.build_keras3_from_a_local_batch(model)
    for name in ("train_step", "test_step"):
        setattr(model, name, with_leading_axis(getattr(model, name)))
    model.train_function = model.test_function = None  # traced before with the scalar logs
    setattr(model, PREPARED, True)
    return True


def worker_backups(callbacks: list, is_chief: bool) -> list:
    """``callbacks`` with each Keras 3 ``BackupAndRestore`` of a worker that is not the chief wrapped in
    a ``WorkerBackup``; the chief's, and every other callback, as they are."""
    if is_chief:
        return list(callbacks)
    return [worker_backup(callback) if _is_keras3_backup(callback) else callback for callback in callbacks]


def _is_keras3_backup(callback: Any) -> bool:
    return keras_compat.flavour_of(callback) == keras_compat.KERAS_3 and keras_compat.has_class_named(
        callback, "BackupAndRestore")


def worker_backup(backup: Any) -> Any:
    """A Keras 3 callback for a worker that is not the chief: it restores from ``backup`` (the chief's
    directory, which every worker must see, as with tf-keras), and saves into a throwaway
    ``BackupAndRestore`` of its own in a temporary directory, removed at the end of training. The
    worker's saves are what MultiWorkerMirroredStrategy runs on every worker; only the chief's count."""
    import atexit
    import shutil
    import tempfile

    import keras

    throwaway_dir = tempfile.mkdtemp(prefix="tfdist-worker-backup-")
    atexit.register(shutil.rmtree, throwaway_dir, ignore_errors=True)  # also after a failed fit

    class WorkerBackup(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.backup = backup
            self.throwaway = keras.callbacks.BackupAndRestore(
                throwaway_dir, save_freq=backup.save_freq,
                double_checkpoint=False, delete_checkpoint=True)

        def set_model(self, model: Any) -> None:
            super().set_model(model)
            self.backup.set_model(model)
            self.throwaway.set_model(model)

        def on_train_begin(self, logs: Any = None) -> None:
            self.backup.on_train_begin(logs)  # reads the chief's copy: the epoch to start at, the weights

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.throwaway.on_epoch_end(epoch, logs)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.throwaway.on_train_batch_end(batch, logs)

        def on_train_end(self, logs: Any = None) -> None:
            self.throwaway.on_train_end(logs)

    return WorkerBackup()


def with_leading_axis(step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``step`` returning each of its logs (tensors) with a leading axis of length 1."""

    def step_with_leading_axis(data: Any) -> Any:
        import tensorflow as tf

        logs = step(data)
        return tf.nest.map_structure(lambda value: tf.expand_dims(value, 0) if tf.is_tensor(value) else value, logs)

    return step_with_leading_axis


__all__ = ["prepare", "with_leading_axis", "worker_backup", "worker_backups"]
