"""System metrics under horovodrun, run by tests/strategies/test_horovod_metrics.py (after
hvd_metrics.py, in its job: ``hvd_metrics.py ... --then-system OUTDIR``, from hvd_figures.py).

    python hvd_system_metrics.py OUTDIR

Every rank runs SystemMetrics on its TensorBoardRun (rank 1's named otherwise: it must still write
into rank 0's run directory) and writes OUTDIR/rank<N>.json: its log_dir and whether its sampling thread
is gone after fit. TFDIST_TEST_KERAS picks tf_keras (default) or keras_3.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np

if os.environ.get("TFDIST_TEST_KERAS", "tf_keras") == "keras_3":
    import keras as K
else:
    import tf_keras as K

from tfdist.callbacks import TensorBoardRun
from tfdist.callbacks.system_metrics import SystemMetrics

OUTDIR = sys.argv[1]


class SlowEpochs(K.callbacks.Callback):
    """Every epoch lasts at least a second, so the samples span several whole-second steps."""

    def on_epoch_end(self, epoch, logs=None):
        time.sleep(1.0)


strategy = tfdist.make_strategy("horovod")
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
with strategy.scope():
    K.utils.set_random_seed(0)
    model = K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="relu"), K.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(0.01)), loss="mse")
# Rank 1 names its run otherwise, as a default name's per-rank timestamp may: SystemMetrics must
# still write into rank 0's run directory.
board = TensorBoardRun(os.path.join(OUTDIR, "tb"), run_name="run" if strategy.rank == 0 else "run-elsewhere",
                       strategy=strategy, batch_size=16)
system = SystemMetrics(board, interval_s=0.5)
strategy.fit(model, x, y, batch_size=16, epochs=3, callbacks=[board, system, SlowEpochs()])
with open(os.path.join(OUTDIR, f"rank{strategy.rank}.json"), "w") as f:
    json.dump({"log_dir": system.log_dir, "running": system.running,
               "threads": [t.name for t in threading.enumerate()]}, f)
