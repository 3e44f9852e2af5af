"""The progress values a 2-worker MultiWorkerMirrored job prints, run by
tests/strategies/test_multi_worker_mirrored_progress.py through `tfdist launch`.

    tfdist launch --backend multi_worker_mirrored --workers 2 -- python mwms_progress.py OUTDIR

Every worker fits a classifier (verbose=1, 2 epochs) and evaluates it (verbose=1); a callback
sleeps after each batch so the progress bar prints every step. Each worker writes
OUTDIR/worker<rank>.json: the logs of the last training batch of every epoch, the History, and the
logs of the last evaluation batch with evaluate's result.
"""
from __future__ import annotations

import json
import os
import sys
import time

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

OUTDIR = sys.argv[1]
SLEEP_S = 0.06  # above the progress bar's 0.05 s refresh interval: every step is printed


class LastBatch(tf.keras.callbacks.Callback):
    """Sleep after every batch; keep the logs of each epoch's (and evaluation's) last batch."""

    def __init__(self) -> None:
        super().__init__()
        self.train: list[dict] = []
        self.test: dict = {}

    def on_epoch_begin(self, epoch, logs=None):
        self.train.append({})

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(SLEEP_S)
        self.train[-1] = {k: float(v) for k, v in (logs or {}).items()}

    def on_test_batch_end(self, batch, logs=None):
        time.sleep(SLEEP_S)
        self.test = {k: float(v) for k, v in (logs or {}).items()}


strategy = tfdist.make_strategy("auto")  # TF_CONFIG with workers only -> multi_worker_mirrored
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :1] + x[:, 1:2] > 0).astype("float32")
with strategy.scope():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(0.05)), loss="binary_crossentropy",
                  metrics=["accuracy"])
last = LastBatch()
history = strategy.fit(model, x, y, batch_size=16, epochs=2, verbose=1, callbacks=[last])
print("=== evaluate", flush=True)
evaluation = strategy.evaluate(model, x, y, batch_size=16, verbose=1, callbacks=[last], return_dict=True)
sys.stdout.flush()
with open(os.path.join(OUTDIR, f"worker{strategy.rank}.json"), "w") as f:
    json.dump({"last_train_batch": last.train, "history": history.history,
               "last_test_batch": last.test, "evaluate": evaluation}, f)
