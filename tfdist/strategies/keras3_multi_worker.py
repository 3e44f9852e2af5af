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
MirroredStrategy. Keras 3's ``BackupAndRestore`` is refused (``backup_refusal``): it has no notion of a
chief, so every worker writes the same ``latest.weights.h5`` at once (h5py: "unable to lock file"). Importing
this module does not import TensorFlow.
"""
from __future__ import annotations

from typing import Any, Callable

from tfdist import keras_compat, upstream
from tfdist.errors import with_fix

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


def backup_refusal(model: Any, callbacks: list) -> str | None:
    """Why ``callbacks`` cannot back up a Keras 3 ``model``'s ``fit`` on several workers, with the fix; or None."""
    if keras_compat.flavour_of(model) != keras_compat.KERAS_3:
        return None
    for index, callback in enumerate(callbacks):
        inner = getattr(callback, "callback", callback)
        if any(klass.__name__ == "BackupAndRestore" for klass in type(inner).__mro__):
            return with_fix(
                f"`callbacks[{index}]` is Keras 3's BackupAndRestore, which has no chief under "
                "MultiWorkerMirroredStrategy: every worker writes the same latest.weights.h5 at once "
                "(h5py: unable to lock file) and restores whatever copy it finds",
                "build the model with tf-keras (its BackupAndRestore is made safe by tfdist here), "
                "or train the Keras 3 model on horovod, or write a custom loop with strategy.checkpoint")
    return None


def with_leading_axis(step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``step`` returning each of its logs (tensors) with a leading axis of length 1."""

    def step_with_leading_axis(data: Any) -> Any:
        import tensorflow as tf

        logs = step(data)
        return tf.nest.map_structure(lambda value: tf.expand_dims(value, 0) if tf.is_tensor(value) else value, logs)

    return step_with_leading_axis


__all__ = ["backup_refusal", "prepare", "with_leading_axis"]
