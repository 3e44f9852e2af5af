"""Per-worker metrics under horovodrun, run by tests/strategies/test_horovod_metrics.py (through
tests/scripts/hvd_figures.py).

    python hvd_metrics.py OUTDIR SLEEP_S [--then-system SYSTEM_OUTDIR]

Rank 1 sleeps SLEEP_S after every training batch, so it is the straggler; each rank writes
OUTDIR/rank<N>.json (its History, the gathered rows and the per-epoch cost of WorkerMetrics), the
chief's TensorBoardRun writes OUTDIR/tb/run. TFDIST_TEST_KERAS picks tf_keras (default) or keras_3.

``--then-system SYSTEM_OUTDIR`` then runs hvd_system_metrics.py on SYSTEM_OUTDIR in the same job,
unchanged, as its own ``__main__`` (one horovodrun start-up for both; the job's exit is then its).
"""
from __future__ import annotations

import json
import os
import sys
import time

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np

if os.environ.get("TFDIST_TEST_KERAS", "tf_keras") == "keras_3":
    import keras as K
else:
    import tf_keras as K

from tfdist.callbacks import TensorBoardRun, WorkerMetrics

if len(sys.argv) not in (3, 5) or (len(sys.argv) == 5 and sys.argv[3] != "--then-system"):
    raise SystemExit(f"usage: hvd_metrics.py OUTDIR SLEEP_S [--then-system SYSTEM_OUTDIR], got {sys.argv[1:]}")
OUTDIR, SLEEP = sys.argv[1], float(sys.argv[2])
BATCH = 16


class Straggle(K.callbacks.Callback):
    """Rank 1 only: sleep after each batch (the others then wait for it in the next allreduce)."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def on_train_batch_end(self, batch, logs=None):
        if self.rank == 1:
            time.sleep(SLEEP)


class Timed(WorkerMetrics):
    """WorkerMetrics that also records how long its epoch-end work took on this rank."""

    costs_ms: list

    def on_epoch_end(self, epoch, logs=None):
        start = time.perf_counter()
        super().on_epoch_end(epoch, logs)
        self.costs_ms = getattr(self, "costs_ms", []) + [1000 * (time.perf_counter() - start)]


strategy = tfdist.make_strategy("horovod")
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
with strategy.scope():
    K.utils.set_random_seed(0)
    model = K.Sequential([K.Input((8,)), K.layers.Dense(32, activation="relu"), K.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(0.01)), loss="mse")
metrics = Timed(BATCH)
board = TensorBoardRun(os.path.join(OUTDIR, "tb"), run_name="run", strategy=strategy, batch_size=BATCH,
                       targets={"loss": ("<=", 1e6)})
history = strategy.fit(model, x, y, batch_size=BATCH, epochs=2, callbacks=[
    Straggle(strategy.rank), strategy.throughput(BATCH), metrics, board], verbose=0)
evaluation = strategy.evaluate(model, x, y, batch_size=BATCH, callbacks=[board], return_dict=True, verbose=0)
with open(os.path.join(OUTDIR, f"rank{strategy.rank}.json"), "w") as f:
    json.dump({"evaluate": evaluation, "history": history.history, "gathered": metrics.gathered,
               "costs_ms": metrics.costs_ms,
               "steps": history.params["steps"], "is_chief": strategy.is_chief}, f)

if len(sys.argv) == 5:
    import runpy

    sys.argv = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "hvd_system_metrics.py"), sys.argv[4]]
    runpy.run_path(sys.argv[0], run_name="__main__")
