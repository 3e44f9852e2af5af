"""A script that knows nothing of plans: ``make_strategy("auto")``, a small fit with Throughput and
TensorBoardRun. Run by tests/strategies/test_planning.py under horovodrun with TFDIST_PLAN set.

    python plan_job.py OUTDIR [OPTIONS_JSON]

Each rank writes OUTDIR/rank<N>.json: the options its strategy was built with and the plan it holds.
TFDIST_TEST_KERAS picks tf_keras (default) or keras_3.
"""
from __future__ import annotations

import dataclasses
import json
import sys

import tfdist  # before tensorflow

import os

import numpy as np

if os.environ.get("TFDIST_TEST_KERAS", "tf_keras") == "keras_3":
    import keras as K
else:
    import tf_keras as K

from tfdist.callbacks import TensorBoardRun

OUTDIR = sys.argv[1]
OPTIONS = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
BATCH = 16

strategy = tfdist.make_strategy("auto", **OPTIONS)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
with strategy.scope():
    K.utils.set_random_seed(0)
    model = K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="relu"), K.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(0.01)), loss="mse")
board = TensorBoardRun(f"{OUTDIR}/tb", "run", batch_size=BATCH)
strategy.fit(model, x, y, batch_size=BATCH, epochs=3, verbose=0, callbacks=[strategy.throughput(BATCH), board])
with open(f"{OUTDIR}/rank{strategy.rank}.json", "w") as out:
    json.dump({"keras": type(model).__module__.split(".")[0], "kind": strategy.kind, "options": {k: v for k, v in dataclasses.asdict(strategy.options).items()
                                                  if isinstance(v, (int, float, str, bool, type(None)))},
               "plan": None if strategy.plan is None else strategy.plan.variant}, out)
