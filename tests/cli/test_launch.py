"""`tfdist launch` option handling and teardown, with tiny non-TensorFlow commands."""
from __future__ import annotations

import subprocess
import sys
import time

from click.testing import CliRunner

from tfdist.cli.launch import launch
from support import subprocess_env


def test_launch_needs_a_command():
    result = CliRunner().invoke(launch, ["--workers", "2"])
    assert result.exit_code == 2
    assert "Missing argument 'COMMAND...'" in result.output


def test_workers_must_be_positive():
    result = CliRunner().invoke(launch, ["--workers", "0", "--", "python", "x.py"])
    assert result.exit_code == 2
    assert "Invalid value for '--workers'" in result.output


def test_unknown_backend_lists_the_choices():
    result = CliRunner().invoke(launch, ["--backend", "mpi", "--", "python"])
    assert result.exit_code == 2
    assert "'parameter_server', 'multi_worker_mirrored', 'horovod'" in result.output


def test_chief_exit_code_is_returned_and_servers_are_torn_down(tmp_path):
    """Non-chief tasks sleep forever; the chief exits 3: launch returns 3 and nothing is left."""
    marker = tmp_path / "marker"
    script = ("import json, os, sys, time\n"
              "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
              "print('hello from', task['type'], flush=True)\n"
              "if task['type'] == 'chief':\n"
              "    time.sleep(1); sys.exit(3)\n"
              "time.sleep(600)\n")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "tfdist", "launch", "--workers", "2", "--ps", "1",
                             "--grace", "1", "--", sys.executable, "-c", script, str(marker)],
                            capture_output=True, text=True, timeout=60, env=subprocess_env())
    assert result.returncode == 3
    assert time.monotonic() - start < 30
    lines = result.stdout.splitlines()
    for task in ("chief:0", "worker:0", "worker:1", "ps:0"):
        assert any(line.startswith(f"[{task}]") and "hello from" in line for line in lines), result.stdout
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(marker) not in ps
