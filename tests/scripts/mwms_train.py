"""Run on every worker by tests/strategies/test_multi_worker_mirrored.py through `tfdist launch`."""
from __future__ import annotations

import json
import os
import sys

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

OUTDIR = sys.argv[1]
strategy = tfdist.make_strategy("auto")  # TF_CONFIG with workers only -> multi_worker_mirrored
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
with strategy.scope():
    tf.keras.utils.set_random_seed(strategy.rank)  # different seeds: mirroring must still agree
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(0.01)), loss="mse")
history = strategy.fit(model, x, y, batch_size=16, epochs=4)
with open(os.path.join(OUTDIR, f"worker{strategy.rank}.json"), "w") as f:
    json.dump({"kind": strategy.kind, "rank": strategy.rank, "is_chief": strategy.is_chief,
               "replicas": strategy.num_replicas_in_sync, "loss": history.history["loss"],
               "weights": [w.tolist() for w in model.get_weights()]}, f)
