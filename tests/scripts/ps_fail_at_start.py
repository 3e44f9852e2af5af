"""Run under `tfdist launch` by tests/cli/test_launch.py: one task fails at start-up.

    python ps_fail_at_start.py TASK MARKER      (TASK e.g. worker:1; MARKER only tags the processes)

The task named TASK exits 1 before it serves; every other task calls
make_strategy("parameter_server"): servers serve, the chief connects to the cluster (which waits
for TASK forever) and then sleeps, standing in for training that needs every task.
"""
import json
import os
import sys
import time

import tfdist

task = json.loads(os.environ["TF_CONFIG"])["task"]
if f"{task['type']}:{task['index']}" == sys.argv[1]:
    print("failing at start-up on purpose", flush=True)
    sys.exit(1)
strategy = tfdist.make_strategy("parameter_server")
print("the chief connected to the cluster", flush=True)
time.sleep(600)
