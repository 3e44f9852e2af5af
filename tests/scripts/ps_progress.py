"""The progress line of `strategy.metrics` on a real cluster, run by tests/callbacks/test_progress_line.py.

    tfdist launch --workers 2 --ps 1 -- python ps_progress.py OUTDIR

The chief fits twice with verbose=2: with strategy.metrics(32) (2 epochs), then, after a line
`=== show_workers`, with strategy.metrics(32, show_workers=True) (1 epoch); it writes both
Histories to OUTDIR/chief.json.
"""
from __future__ import annotations

import json
import os
import sys

import tfdist

import numpy as np
import tensorflow as tf

OUTDIR = sys.argv[1]
strategy = tfdist.make_strategy("auto", chief_grace_seconds=5)  # servers serve and end in here
with strategy.scope():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(0.01)),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
runs = {}
for name, metrics, epochs in (("default", strategy.metrics(32), 2),
                              ("show_workers", strategy.metrics(32, show_workers=True), 1)):
    if name == "show_workers":
        print("=== show_workers", flush=True)
    history = strategy.fit(model, x, y, batch_size=32, epochs=epochs, steps_per_epoch=16,
                           validation_data=(x[:256], y[:256]), verbose=2, callbacks=metrics)
    sys.stdout.flush()
    runs[name] = history.history
with open(os.path.join(OUTDIR, "chief.json"), "w") as f:
    json.dump(runs, f)
