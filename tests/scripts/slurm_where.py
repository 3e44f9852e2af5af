"""Where a SLURM task runs, then the task's own command: for tests/multihost/test_slurm.py.

    python slurm_where.py DIR COMMAND...

Writes DIR/<type>-<index>.json (the task from TF_CONFIG): the host it runs on, its SLURM task and node
ids and its TF_CONFIG, then ``exec``s COMMAND in the same process (same pid, same environment), so a
test reads SLURM's placement of every task next to the cluster each task was given.
"""
from __future__ import annotations

import json
import os
import socket
import sys

directory, command = sys.argv[1], sys.argv[2:]
tf_config = json.loads(os.environ["TF_CONFIG"])
task = tf_config["task"]
os.makedirs(directory, exist_ok=True)
path = os.path.join(directory, f"{task['type']}-{task['index']}.json")
record = {"host": socket.gethostname(), "procid": int(os.environ["SLURM_PROCID"]),
          "nodeid": int(os.environ["SLURM_NODEID"]), "pid": os.getpid(), "tf_config": tf_config}
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.rename(path + ".tmp", path)
os.execvp(command[0], command)
