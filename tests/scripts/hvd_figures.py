"""Both Kerases' per-worker and system figures in one horovodrun job, for
tests/strategies/test_horovod_metrics.py.

    python hvd_figures.py SLEEP_S ROOT KERAS [KERAS ...]      (KERAS: tf_keras or keras_3)

For each KERAS in turn, in the same processes (one TensorFlow and Horovod start-up for all):
hvd_metrics.py on ROOT/<KERAS>/metrics with SLEEP_S, then hvd_system_metrics.py on
ROOT/<KERAS>/system, each unchanged as its own ``__main__`` with TFDIST_TEST_KERAS set to KERAS.
Each part writes its own rank<N>.json as it ends: a part without them did not finish.
"""
from __future__ import annotations

import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

if len(sys.argv) < 4 or not set(sys.argv[3:]) <= {"tf_keras", "keras_3"}:
    raise SystemExit(f"usage: hvd_figures.py SLEEP_S ROOT KERAS [KERAS ...], got {sys.argv[1:]}")
SLEEP, ROOT = sys.argv[1], sys.argv[2]
for keras in sys.argv[3:]:
    metrics, system = os.path.join(ROOT, keras, "metrics"), os.path.join(ROOT, keras, "system")
    os.makedirs(metrics, exist_ok=True)
    os.makedirs(system, exist_ok=True)
    os.environ["TFDIST_TEST_KERAS"] = keras
    sys.argv = [os.path.join(HERE, "hvd_metrics.py"), metrics, SLEEP, "--then-system", system]
    runpy.run_path(sys.argv[0], run_name="__main__")
