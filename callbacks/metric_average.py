"""Make the epoch-end metrics every rank logs the mean over all ranks."""
from __future__ import annotations

import numbers

import tensorflow as tf

from tfdist.callbacks import _runtime


class MetricAverage(tf.keras.callbacks.Callback):
    """Replace each epoch-end metric with its mean over the Horovod ranks, in place.

    Metrics are reduced in sorted name order, the same on every rank, so the collective calls
    always pair up. Put it before the callbacks that read metrics (checkpoints, TensorBoard);
    ``strategy.fit`` does. A no-op outside Horovod, where tf.distribute already aggregates.
    """

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        hvd = _runtime.horovod()
        if hvd is None or not logs or hvd.size() == 1:
            return
        names = sorted(name for name, value in logs.items() if isinstance(value, numbers.Number)
                       or (hasattr(value, "shape") and getattr(value, "shape", None) == ()))
        if not names:
            return
        values = tf.constant([float(logs[name]) for name in names], dtype=tf.float64)
        averaged = hvd.allreduce(values, op=hvd.Average, name=f"tfdist.metric_average.{epoch}")
        for name, value in zip(names, averaged.numpy().tolist()):
            logs[name] = value
