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


def test_a_missing_executable_is_a_usage_error_not_a_traceback():
    result = CliRunner().invoke(launch, ["--", "no-such-binary-xyz", "train.py"])
    assert result.exit_code == 2
    assert "'no-such-binary-xyz' is not an executable on PATH" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_options_of_another_backend_are_refused():
    result = CliRunner().invoke(launch, ["--backend", "multi_worker_mirrored", "--ps", "2", "--", "python"])
    assert result.exit_code == 2
    assert "--ps do(es) not apply to --backend multi_worker_mirrored" in result.output
    result = CliRunner().invoke(launch, ["-np", "4", "--", "python"])
    assert "-np do(es) not apply to --backend parameter_server" in result.output


def test_a_mistyped_option_is_caught_before_the_command():
    result = CliRunner().invoke(launch, ["--worker", "2", "--", "python", "x.py"])
    assert result.exit_code == 2
    assert "No such option '--worker'. Did you mean '--workers'?" in result.output


def test_a_task_killed_by_a_signal_reports_128_plus_the_signal():
    from tfdist.launch.local import exit_code

    assert exit_code(-9) == 137 and exit_code(3) == 3 and exit_code(0) == 0


def test_sigterm_to_the_launcher_stops_every_task_with_sigterm(tmp_path):
    """Every task gets SIGTERM (not only the SIGKILL after the grace period) and nothing is left."""
    import os
    import signal

    script = ("import os, signal, sys, time\n"
              "def bye(signum, frame):\n"
              f"    open(os.path.join({str(tmp_path)!r}, 'term-%d' % os.getpid()), 'w').close()\n"
              "    sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, bye)\n"
              "print('up', flush=True)\n"
              "time.sleep(600)\n")
    launcher = subprocess.Popen([sys.executable, "-m", "tfdist", "launch", "--workers", "1", "--ps", "1",
                                 "--grace", "10", "--", sys.executable, "-c", script, str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True,
                                                         text=True).stdout.count("\n") < 4:
        time.sleep(0.2)
    time.sleep(0.5)  # let the tasks install their handlers
    start = time.monotonic()
    os.kill(launcher.pid, signal.SIGTERM)
    assert launcher.wait(timeout=30) == 130
    assert time.monotonic() - start < 8, "tasks ignored SIGTERM and waited for the SIGKILL"
    assert len(list(tmp_path.glob("term-*"))) == 3  # chief, worker and ps each saw SIGTERM
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert [pid for pid in left if int(pid) != launcher.pid] == []
