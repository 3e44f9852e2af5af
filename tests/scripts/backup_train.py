"""BackupAndRestore under tfdist, interrupted, corrupted and starved of disk (tests/callbacks/test_backup.py).

    python backup_train.py MODE OUTDIR      # MODE: interrupt, resume, disk-full

Every finished epoch is appended to OUTDIR/epochs.txt; the backup lives in OUTDIR/backup.
"""
from __future__ import annotations

import os
import resource
import sys

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

MODE, OUTDIR = sys.argv[1], sys.argv[2]
strategy = tfdist.make_strategy("single")
tf.keras.utils.set_random_seed(0)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])
model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(0.01)), loss="mse")
x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")


class Events(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if MODE == "interrupt" and epoch == 2:
            raise SystemExit("interrupted at epoch 2 on purpose")
        if MODE == "disk-full" and epoch == 2:  # the disk fills up: the next save cannot be written
            resource.setrlimit(resource.RLIMIT_FSIZE, (512, resource.RLIM_INFINITY))

    def on_epoch_end(self, epoch, logs=None):
        with open(os.path.join(OUTDIR, "epochs.txt"), "a") as f:
            f.write(f"{epoch}\n")


backup = tf.keras.callbacks.BackupAndRestore(os.path.join(OUTDIR, "backup"))
strategy.fit(model, x, x.sum(axis=1, keepdims=True), batch_size=32, epochs=4, verbose=0,
             callbacks=[backup, Events()])
print("FINISHED", flush=True)
