"""ParameterServerMetrics on a real cluster, run by tests/strategies/test_parameter_server_metrics.py.

    tfdist launch --workers 2 --ps 1 -- python ps_metrics.py OUTDIR

The chief trains with strategy.metrics and a TensorBoardRun and writes OUTDIR/chief.json: the
History and the steps each epoch ran.
"""
from __future__ import annotations

import json
import os
import sys

import tfdist

import numpy as np
import tensorflow as tf

from tfdist.callbacks import TensorBoardRun

OUTDIR = sys.argv[1]
strategy = tfdist.make_strategy("auto", chief_grace_seconds=5)  # servers serve and end in here
with strategy.scope():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(0.01)), loss="mse")
x = np.random.default_rng(0).normal(size=(2048, 8)).astype("float32")
board = TensorBoardRun(os.path.join(OUTDIR, "runs"), run_name="ps", strategy=strategy, batch_size=32)
history = strategy.fit(model, x, x[:, :1], batch_size=32, epochs=3, steps_per_epoch=40, verbose=0,
                       callbacks=[*strategy.metrics(32), board])
with open(os.path.join(OUTDIR, "chief.json"), "w") as f:
    json.dump({"history": history.history, "steps": history.params["steps"]}, f)
