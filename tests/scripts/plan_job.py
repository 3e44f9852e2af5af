"""A script that knows nothing of plans: ``make_strategy("auto")``, a small fit with Throughput and
TensorBoardRun. Run by tests/strategies/test_planning.py under horovodrun with TFDIST_PLAN set.

    python plan_job.py OUTDIR OPTIONS_JSON [KERAS_JSON]

OPTIONS_JSON is a list of options dicts for make_strategy: one run each, one after the other in the
same job (a new make_strategy, model and fit each), so one horovodrun job serves several tests. Run
``i`` writes OUTDIR/run<i>/rank<N>.json on each rank: the options its strategy was built with, the
plan it holds and the tfdist warnings logged during the run; with TFDIST_PLAN_RESULT set, its
measured figures go to OUTDIR/run<i>/measured.json. KERAS_JSON, a list as long, picks each run's
Keras (``tf_keras`` or ``keras_3``); without it TFDIST_TEST_KERAS picks it for all: tf_keras
(default) or keras_3.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import sys

import tfdist  # before tensorflow

import os

import numpy as np

from tfdist.plan import PLAN_RESULT_ENV
from tfdist.callbacks import TensorBoardRun

OUTDIR = sys.argv[1]
RUNS = json.loads(sys.argv[2])
KERASES = json.loads(sys.argv[3]) if len(sys.argv) > 3 else [os.environ.get("TFDIST_TEST_KERAS", "tf_keras")] * len(RUNS)
if len(KERASES) != len(RUNS) or not set(KERASES) <= {"tf_keras", "keras_3"}:
    raise SystemExit(f"usage: plan_job.py OUTDIR OPTIONS_JSON [KERAS_JSON], got {sys.argv[1:]}")
BATCH = 16


class Warnings(logging.Handler):
    """The tfdist warnings of one run, as logged (what the job prints on stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run(options: dict, outdir: str, keras: str) -> None:
    """make_strategy("auto", **options), a 3-epoch fit of a ``keras`` model, and outdir/rank<N>.json."""
    K = importlib.import_module("keras" if keras == "keras_3" else "tf_keras")
    warnings = Warnings()
    logging.getLogger("tfdist").addHandler(warnings)
    try:
        strategy = tfdist.make_strategy("auto", **options)
        rng = np.random.default_rng(0)
        x = rng.normal(size=(512, 8)).astype("float32")
        y = (x @ rng.normal(size=(8, 1))).astype("float32")
        with strategy.scope():
            K.utils.set_random_seed(0)
            model = K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="relu"), K.layers.Dense(1)])
            model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(0.01)), loss="mse")
        board = TensorBoardRun(f"{outdir}/tb", "run", batch_size=BATCH)
        strategy.fit(model, x, y, batch_size=BATCH, epochs=3, verbose=0,
                     callbacks=[strategy.throughput(BATCH), board])
    finally:
        logging.getLogger("tfdist").removeHandler(warnings)
    with open(f"{outdir}/rank{strategy.rank}.json", "w") as out:
        json.dump({"keras": type(model).__module__.split(".")[0], "kind": strategy.kind,
                   "options": {k: v for k, v in dataclasses.asdict(strategy.options).items()
                               if isinstance(v, (int, float, str, bool, type(None)))},
                   "plan": None if strategy.plan is None else strategy.plan.variant,
                   "warnings": warnings.messages}, out)


# A handler on tfdist's logger turns off logging's last resort (WARNING and up to stderr, the message
# alone), which is how tfdist's warnings reach the job's output: print them the same way.
stderr = logging.StreamHandler(sys.stderr)
stderr.setLevel(logging.WARNING)
logging.getLogger().addHandler(stderr)
measured = PLAN_RESULT_ENV in os.environ
for index, (options, keras) in enumerate(zip(RUNS, KERASES)):
    outdir = os.path.join(OUTDIR, f"run{index}")
    os.makedirs(outdir, exist_ok=True)
    if measured:
        os.environ[PLAN_RESULT_ENV] = os.path.join(outdir, "measured.json")
    run(options, outdir, keras)
