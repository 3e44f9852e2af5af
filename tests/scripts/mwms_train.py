"""Run on every worker by tests/strategies/test_multi_worker_mirrored.py through `tfdist launch`."""
from __future__ import annotations

import json
import os
import sys
import time

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

OUTDIR = sys.argv[1]
STRAGGLE_S = 0.03  # s per step on worker 1: well above what a busy 2-core host adds to a step of this model
strategy = tfdist.make_strategy("auto")  # TF_CONFIG with workers only -> multi_worker_mirrored
rng = np.random.default_rng(0)
x = rng.normal(size=(500, 8)).astype("float32")  # global batches of 32: the last one partial
y = (x @ rng.normal(size=(8, 1))).astype("float32")
index_of = {float(value): i for i, value in enumerate(x[:, 0])}
seen: list[list[int]] = []  # per epoch, the examples this worker trained on, in order


def record(features):
    if strategy.rank == 1:  # worker 1 straggles: its forward pass takes longer, and worker 0 waits for it
        time.sleep(STRAGGLE_S)
    seen[-1].extend(index_of[float(value)] for value in features.numpy()[:, 0])
    return features


class Record(tf.keras.layers.Layer):
    """Passes its inputs on, noting which examples this worker trains on."""

    def call(self, inputs):
        out = tf.py_function(record, [inputs], Tout=inputs.dtype)
        out.set_shape(inputs.shape)
        return out


with strategy.scope():
    tf.keras.utils.set_random_seed(strategy.rank)  # different seeds: mirroring must still agree
    model = tf.keras.Sequential([tf.keras.Input((8,)), Record(), tf.keras.layers.Dense(16, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(0.01)), loss="mse")
epochs = tf.keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: seen.append([]))
history = strategy.fit(model, x, y, batch_size=16, epochs=4, callbacks=[epochs, *strategy.metrics(16, show_workers=True)])
with open(os.path.join(OUTDIR, f"worker{strategy.rank}.json"), "w") as f:
    json.dump({"kind": strategy.kind, "rank": strategy.rank, "is_chief": strategy.is_chief,
               "replicas": strategy.num_replicas_in_sync, "loss": history.history["loss"],
               "weights": [w.tolist() for w in model.get_weights()], "seen": seen,
               "figures": {key: values for key, values in history.history.items() if "worker" in key or "comm" in key}}, f)
