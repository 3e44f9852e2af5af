"""Make the metrics every rank logs the mean over all ranks, before any writer reads them."""
from __future__ import annotations

import numbers
from typing import Any

import tensorflow as tf
import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist.callbacks import _runtime


def _numeric_names(logs: dict) -> list[str]:
    return sorted(name for name, value in logs.items()
                  if (isinstance(value, numbers.Number) and not isinstance(value, bool))
                  or getattr(value, "shape", None) == ())


def average_over_ranks(hvd: Any, values: dict, name: str) -> dict:
    """``values`` with every number replaced by its mean over the Horovod ranks, reduced in sorted
    name order (the same on every rank, so the allreduces pair up); other entries unchanged."""
    names = _numeric_names(values)
    if not names or hvd.size() == 1:
        return dict(values)
    averaged = hvd.allreduce(tf.constant([float(values[n]) for n in names], dtype=tf.float64),
                             op=hvd.Average, name=name)
    return {**values, **dict(zip(names, averaged.numpy().tolist()))}


class MetricAverage(tf_keras.callbacks.Callback):
    """Replace each logged metric with its mean over the Horovod ranks, in place.

    Averaged: the epoch-end logs (``loss``, ``val_loss``, ...), the logs at the end of every
    evaluation (what TensorBoard writes as ``evaluation_<metric>_vs_iterations``), and, with
    ``batch_level=True``, every training batch's logs (what TensorBoard writes with
    ``update_freq="batch"``; ``strategy.fit`` turns it on when a writer reads batch logs).

    Metrics are reduced in sorted name order, the same on every rank, so the collective calls
    always pair up. Put it before the callbacks that read metrics (checkpoints, TensorBoard);
    ``strategy.fit`` does. A no-op outside Horovod, where tf.distribute already aggregates.
    """

    def __init__(self, batch_level: bool = False) -> None:
        super().__init__()
        self.batch_level = batch_level

    @property
    def batch_level(self) -> bool:
        return "on_train_batch_end" in vars(self)

    @batch_level.setter
    def batch_level(self, value: bool) -> None:
        # Keras calls a callback every batch only when it overrides a batch hook, and refuses
        # batch hooks under ParameterServerStrategy: so the hook exists only when asked for.
        if value:
            self.on_train_batch_end = self._average_batch
        else:
            vars(self).pop("on_train_batch_end", None)

    def _average(self, logs: Any, name: str) -> None:
        hvd = _runtime.horovod()
        if hvd is not None and logs:
            logs.update(average_over_ranks(hvd, logs, name))

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        self._average(logs, f"tfdist.metric_average.{epoch}")

    def on_test_end(self, logs=None) -> None:
        self._average(logs, "tfdist.metric_average.test")

    def _average_batch(self, batch: int, logs=None) -> None:
        self._average(logs, "tfdist.metric_average.batch")
