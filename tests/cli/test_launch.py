"""`tfdist launch` option handling and teardown, with tiny non-TensorFlow commands."""
from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tfdist.cli.launch import launch
from ctrl_c import interrupt_during_the_probe
from support import SCRIPTS, subprocess_env


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


# --- every exit is printed; the job never hangs silently; tasks die with the launcher ------------

# A task that listens on its own TF_CONFIG port (as a server would) and waits there; the last
# argument is a directory. With `--exit TASK CODE`, TASK exits with CODE (a worker only once the
# launcher's probe has seen it listening) and leaves a file `gone`; with `--chief-waits` the chief
# then exits 0 two seconds later.
_SERVING_SCRIPT = """\
import json, os, socket, sys, time
config = json.loads(os.environ['TF_CONFIG'])
kind, index = config['task']['type'], config['task']['index']
name = '%s:%d' % (kind, index)
server = socket.create_server(('127.0.0.1', int(config['cluster'][kind][index].rsplit(':', 1)[1])))
print('up', name, flush=True)
gone = os.path.join(sys.argv[-1], 'gone')
if sys.argv[1:3] == ['--exit', name]:
    if kind == 'worker':
        server.accept()
    open(gone, 'w').close()
    sys.exit(int(sys.argv[3]))
if name == 'chief:0' and '--chief-waits' in sys.argv:
    while not os.path.exists(gone):
        time.sleep(0.1)
    time.sleep(2)
    sys.exit(0)
time.sleep(600)
"""


def _pids(marker: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """Processes whose command line contains ``marker`` (tasks this test started), minus ``exclude``."""
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if int(pid) not in (os.getpid(), *exclude)]


def _describe(pids: list[int]) -> list[str]:
    """What a failure message needs of each pid: its state, signal masks and command line."""
    described = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            described.append(f"{pid}: gone")
            continue
        fields = [line for line in status if line.startswith(("State:", "PPid:", "SigBlk:", "SigIgn:", "SigCgt:"))]
        described.append(f"{pid} {' '.join(fields)} {command[:200]}")
    return described


def _kill_leftovers(marker: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """SIGKILL every process this test left behind, by pid; the pids that were left."""
    left = _pids(marker, exclude)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _launch(marker: str, *options: str, script: str = _SERVING_SCRIPT, args: tuple[str, ...] = (),
            timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`tfdist launch OPTIONS -- python -c SCRIPT ARGS MARKER` (in ``env``, default ``subprocess_env()``);
    fails if a task is left running."""
    try:
        return subprocess.run([sys.executable, "-m", "tfdist", "launch", *options, "--grace", "2", "--",
                               sys.executable, "-c", script, *args, marker],
                              capture_output=True, text=True, timeout=timeout,
                              env=subprocess_env() if env is None else env)
    finally:
        assert _kill_leftovers(marker) == [], "tasks were left running"


# What a task's Python reports of its Keras: the variable, and which package `tf.keras` is (keras: Keras 3,
# tf_keras: tf-keras). The script imports TensorFlow, not tfdist, as a plain Horovod script does.
_KERAS_REPORT = ("import tensorflow as tf\n"
                 "print('tf.keras-is:', os.environ.get('TF_USE_LEGACY_KERAS'),\n"
                 "      tf.keras.Model.__module__.split('.')[0], flush=True)\n")


def _without_keras_choice() -> dict[str, str]:
    """``subprocess_env()`` without TF_USE_LEGACY_KERAS: a caller who has not chosen a Keras (the suite
    exports TF_USE_LEGACY_KERAS=1)."""
    env = subprocess_env()
    env.pop("TF_USE_LEGACY_KERAS", None)
    return env


def _closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def test_a_worker_lost_after_it_served_is_reported_and_tolerated(tmp_path):
    result = _launch(str(tmp_path), "--workers", "2", "--ps", "1",
                     args=("--exit", "worker:1", "1", "--chief-waits"))
    assert result.returncode == 0, result.stderr
    assert "tfdist launch: worker:1 exited with code 1; the coordinator goes on with 1 worker\n" \
        in result.stderr
    assert "tfdist launch: chief:0 exited with code 0\n" in result.stderr
    assert "stopping the job" not in result.stderr


def test_a_lost_ps_ends_the_job_after_the_task_timeout(tmp_path):
    result = _launch(str(tmp_path), "--workers", "1", "--ps", "1", "--task-timeout", "2",
                     args=("--exit", "ps:0", "1"))
    assert result.returncode == 1, result.stderr
    assert ("tfdist launch: ps:0 exited with code 1; training cannot go on without the variables a ps task "
            "holds, so the job ends in 2 s unless the chief exits first\n") in result.stderr
    assert ("tfdist launch: stopping the job: it lost ps:0 and the chief is still running 2 s later; "
            "fix: read the [ps:0] lines above") in result.stderr
    assert "tfdist launch: stopped chief:0, worker:0\n" in result.stderr


@pytest.mark.cluster
def test_a_worker_failing_at_start_up_ends_the_job_and_says_so(tmp_path):
    """Real `tfdist launch --workers 2 --ps 1`: worker:1 exits 1 before serving; the chief would wait
    for it forever (it connects to every task at start-up). The job must end, non-zero, and say why."""
    marker = str(tmp_path / "marker")
    try:
        result = subprocess.run([sys.executable, "-m", "tfdist", "launch", "--workers", "2", "--ps", "1",
                                 "--task-timeout", "10", "--grace", "2", "--", sys.executable,
                                 str(SCRIPTS / "ps_fail_at_start.py"), "worker:1", marker],
                                capture_output=True, text=True, timeout=240, env=subprocess_env())
    finally:
        left = _kill_leftovers(marker)
    assert left == [], "tasks were left running"
    assert result.returncode != 0
    assert "[worker:1] failing at start-up on purpose" in result.stdout
    assert ("tfdist launch: worker:1 exited with code 1 before it served; the chief cannot connect to the "
            "cluster without it, so the job ends in") in result.stderr
    # the launcher stops the job 10 s later, unless the chief gave up by itself first (its own check)
    chief_failed = any(line.startswith("tfdist launch: chief:0 ") and not line.endswith(" code 0")
                       for line in result.stderr.splitlines())
    assert chief_failed or ("tfdist launch: stopping the job: it lost worker:1 and the chief is still "
                            "running 10 s later") in result.stderr, result.stderr


def test_multi_worker_mirrored_prints_every_exit_and_stops_at_the_first_failure(tmp_path):
    script = ("import json, os, sys, time\n"
              "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
              "if task['index'] == 1:\n"
              "    sys.exit(3)\n"
              "time.sleep(600)\n")
    result = _launch(str(tmp_path), "--backend", "multi_worker_mirrored", "--workers", "2", script=script)
    assert result.returncode == 3
    assert ("tfdist launch: worker:1 exited with code 3; stopping the other workers (every worker must take "
            "part in each step)\n") in result.stderr
    assert "tfdist launch: stopped worker:0\n" in result.stderr


def test_task_timeout_is_refused_on_other_backends():
    result = CliRunner().invoke(launch, ["--backend", "multi_worker_mirrored", "--task-timeout", "5",
                                         "--", "python"])
    assert result.exit_code == 2
    assert "--task-timeout do(es) not apply to --backend multi_worker_mirrored" in result.output


def test_tasks_die_with_a_sigkilled_launcher(tmp_path):
    """SIGKILL leaves the launcher no time to stop anything: the tasks' parent-death signal must."""
    marker = str(tmp_path)
    launcher = subprocess.Popen([sys.executable, "-m", "tfdist", "launch", "--workers", "2", "--ps", "1",
                                 "--", sys.executable, "-c", _SERVING_SCRIPT, marker],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=subprocess_env())
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in launcher.stderr], daemon=True).start()
        banner = ""
        while " ports " not in banner:  # a launcher that stalls fails the test instead of hanging it
            banner = lines.get(timeout=120)
        ports = [int(port) for port in banner.rsplit(" ports ", 1)[1].split(", ")]
        assert len(ports) == 4
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_closed(port) for port in ports):
            time.sleep(0.2)
        tasks = _pids(marker, exclude=(launcher.pid,))
        assert len(tasks) == 4 and not any(_closed(port) for port in ports), "the tasks did not come up"
        launcher.kill()
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (_pids(marker) or not all(_closed(port) for port in ports)):
            time.sleep(0.2)
        assert _pids(marker) == [], "tasks outlived the launcher"
        assert all(_closed(port) for port in ports)
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stderr.close()
        _kill_leftovers(marker)


def test_horovodrun_dies_with_a_sigkilled_launcher(tmp_path):
    """`--backend horovod` runs one process, horovodrun; here a stand-in that sleeps."""
    marker = str(tmp_path)
    code = ("import sys\n"
            "from tfdist.launch.local import run_command\n"
            f"sys.exit(run_command([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}]))\n")
    launcher = subprocess.Popen([sys.executable, "-c", code], env=subprocess_env())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _pids(marker, exclude=(launcher.pid,)):
            time.sleep(0.2)
        assert _pids(marker, exclude=(launcher.pid,)), "the stand-in did not start"
        launcher.kill()
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _pids(marker):
            time.sleep(0.2)
        assert _pids(marker) == [], "horovodrun outlived the launcher"
    finally:
        launcher.kill()
        launcher.wait()
        _kill_leftovers(marker)


def test_bind_all_says_the_servers_listen_on_every_interface(tmp_path):
    result = _launch(str(tmp_path), "--workers", "1", "--ps", "1", "--bind-all", script="pass")
    assert result.returncode == 0, result.stderr
    banner = next(line for line in result.stderr.splitlines() if line.startswith("tfdist launch: chief:0, "))
    assert banner.startswith("tfdist launch: chief:0, worker:0, ps:0 on every interface, ports "), banner
    assert "127.0.0.1" not in banner


def _fake_horovodrun(tmp_path: Path, body: str, monkeypatch) -> Path:
    """A shell script named horovodrun in ``tmp_path/venv/bin``, found beside ``sys.executable`` (patched
    to that directory's python) as `make setup`'s venv would have it; ``body`` follows the shebang."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    horovodrun = bin_dir / "horovodrun"
    horovodrun.write_text("#!/bin/sh\n" + body)
    horovodrun.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    return horovodrun


def test_horovodrun_is_found_beside_the_interpreter_without_the_venv_on_path(tmp_path, monkeypatch):
    """`.venv/bin/tfdist launch --backend horovod` without `source .venv/bin/activate`."""
    _fake_horovodrun(tmp_path, f"echo \"$@\" > {tmp_path / 'args'}\nexit 7\n", monkeypatch)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = CliRunner().invoke(launch, ["--backend", "horovod", "-np", "2", "--", "/bin/echo", "train.py"])
    assert result.exit_code == 7, result.output
    assert (tmp_path / "args").read_text() == "-np 2 -H localhost:2 --gloo /bin/echo train.py\n"
    assert "tfdist launch: horovodrun exited with code 7" in result.output


def test_without_horovodrun_the_error_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(launch, ["--backend", "horovod", "--", "/bin/echo"])
    assert result.exit_code == 2
    assert f"horovodrun is neither beside {tmp_path / 'python'} nor on PATH; fix: " in result.output


@pytest.mark.horovod
def test_venv_tfdist_runs_horovodrun_without_the_venv_on_path_and_takes_it_down_when_killed(tmp_path):
    """`.venv/bin/tfdist launch --backend horovod` with a PATH that lacks the venv finds its horovodrun;
    SIGKILLing the launcher then takes horovodrun and its ranks down (horovodrun stops them on SIGTERM)."""
    marker = str(tmp_path)
    rank = ("import os, sys, time\n"
            "open(os.path.join(sys.argv[1], 'rank-%d' % os.getpid()), 'w').close()\n"
            "time.sleep(600)\n")
    env = subprocess_env(PATH="/usr/bin:/bin")
    launcher = subprocess.Popen([str(Path(sys.executable).parent / "tfdist"), "launch", "--backend",
                                 "horovod", "-np", "2", "--", sys.executable, "-c", rank, marker],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        ranks = lambda: len(list(tmp_path.glob("rank-*")))  # noqa: E731
        while time.monotonic() < deadline and ranks() < 2 and launcher.poll() is None:
            time.sleep(0.2)
        assert ranks() == 2, launcher.stderr.read() if launcher.poll() is not None else "no ranks"
        launcher.kill()
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _pids(marker):
            time.sleep(0.2)
        left = _pids(marker)
        assert left == [], f"horovodrun or its ranks outlived the launcher: {_describe(left)}"
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stderr.close()
        _kill_leftovers(marker)


# --- --hosts: options, and the whole path through the supervisor on this machine (no ssh) -------

@pytest.mark.parametrize("args, message", [
    (["--chief-host", "a", "--", "python"], "--chief-host needs --hosts; fix: add --hosts"),
    (["--ssh-port", "22", "--", "python"], "--ssh-port needs --hosts"),
    (["--backend", "multi_worker_mirrored", "--ps-hosts", "a", "--hosts", "a:2", "--", "python"],
     "--ps-hosts do(es) not apply to --backend multi_worker_mirrored"),
    (["--backend", "horovod", "--elastic", "--min-np", "1", "--", "python"], "--elastic needs --hosts"),
    (["--backend", "horovod", "--elastic", "--hosts", "a:1,b:1", "--", "python"], "--elastic needs --min-np"),
    (["--backend", "horovod", "--max-np", "2", "--", "python"], "--max-np needs --elastic"),
    (["--elastic", "--", "python"], "--elastic do(es) not apply to --backend parameter_server"),
    (["--network-interface", "eth0", "--", "python"], "--network-interface do(es) not apply to --backend"),
    (["--hosts", "a:2,a:1", "--", "python"], "--hosts lists host 'a' twice"),
    (["--hosts", "a:1,b:1", "--workers", "2", "--", "python"],
     "needs 3 slots (2 worker + 1 ps) but --hosts gives 2; fix: "),
])
def test_host_options_are_checked_before_anything_starts(args, message):
    result = CliRunner().invoke(launch, args)
    assert result.exit_code == 2, result.output
    assert message in result.output, result.output


def test_horovod_with_hosts_passes_them_and_ssh_options_to_horovodrun(tmp_path, monkeypatch):
    """... and puts tfdist's ssh wrapper first on horovodrun's PATH (host keys checked, keepalives,
    ranks supervised), in a directory removed afterwards."""
    _fake_horovodrun(tmp_path, f"echo \"$@\" > {tmp_path / 'args'}\n"
                                f"command -v ssh > {tmp_path / 'ssh'}\n"
                                f"grep -c tfdist.launch.ssh_wrapper \"$(command -v ssh)\" >> {tmp_path / 'ssh'}\n",
                     monkeypatch)
    key = tmp_path / "key"
    key.write_text("")
    result = CliRunner().invoke(launch, ["--backend", "horovod", "--hosts", "a:2,b:1", "--ssh-port", "2222",
                                         "--ssh-identity-file", str(key), "--", "/bin/echo", "t.py"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "args").read_text() == f"-np 3 -H a:2,b:1 -p 2222 -i {key} --gloo /bin/echo t.py\n"
    ssh, wrapper_lines = (tmp_path / "ssh").read_text().split()
    assert Path(ssh).name == "ssh" and Path(ssh).parent.name == "bin" and wrapper_lines == "1", \
        "horovodrun must find tfdist's ssh wrapper first on its PATH"
    assert not Path(ssh).exists() and not Path(ssh).parent.parent.exists(), "the wrapper's directory is removed"
    assert "tfdist launch: horovodrun exited with code 0" in result.output
    result = CliRunner().invoke(launch, ["--backend", "horovod", "--hosts", "a:1", "-np", "2", "--", "/bin/echo"])
    assert result.exit_code == 2 and "-np 2 needs 2 slots but --hosts a:1 gives 1" in result.output


def test_horovod_without_hosts_runs_horovodrun_directly(tmp_path, monkeypatch):
    _fake_horovodrun(tmp_path, f"echo \"$@\" > {tmp_path / 'args'}\necho \"$PATH\" >> {tmp_path / 'args'}\n",
                     monkeypatch)
    result = CliRunner().invoke(launch, ["--backend", "horovod", "-np", "2", "--", "/bin/echo", "t.py"])
    assert result.exit_code == 0, result.output
    args, path = (tmp_path / "args").read_text().splitlines()
    assert args == "-np 2 -H localhost:2 --gloo /bin/echo t.py" and path == os.environ["PATH"]
    result = CliRunner().invoke(launch, ["--backend", "horovod", "--network-interface", "eth1", "--", "/bin/echo"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "args").read_text().splitlines()[0] == "--network-interface eth1 -np 2 -H localhost:2 --gloo /bin/echo"


def test_hosts_on_this_machine_run_through_the_supervisor_with_prefixed_lines_and_no_leftovers(tmp_path):
    """`--hosts localhost:4`: every task goes through `tfdist.launch.remote_task` (without ssh, since
    localhost is this machine), with its bind variables computed by the supervisor. The caller leaves
    TF_USE_LEGACY_KERAS unset and so does every task: the supervisor's own `import tfdist` set it, and
    its tasks got it, before `python -m tfdist.launch.remote_task` took it back."""
    script = ("import json, os, sys, time\n"
              "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
              "print('hello from', task['type'], os.environ.get('TFDIST_BIND_ADDRESS'), os.getcwd(),\n"
              "      os.environ.get('TF_USE_LEGACY_KERAS'), flush=True)\n"
              "if task['type'] == 'chief':\n"
              "    time.sleep(1); sys.exit(3)\n"
              "time.sleep(600)\n")
    result = _launch(str(tmp_path), "--hosts", "localhost:4", "--workers", "2", "--ps", "1", script=script,
                     env=_without_keras_choice())
    assert result.returncode == 3, result.stderr
    for task in ("chief:0", "worker:0", "worker:1", "ps:0"):
        assert any(line.startswith(f"[{task}@localhost]") and f" 127.0.0.1 {os.getcwd()} None" in line
                   for line in result.stdout.splitlines()), result.stdout
    assert "tfdist launch: chief:0 on localhost:" in result.stderr
    assert "tfdist launch: stopped worker:0, worker:1, ps:0\n" in result.stderr


def test_an_unreachable_host_stops_the_launch_before_anything_starts(tmp_path):
    """ssh to a host that does not exist: one line naming the host and the fix, exit 2, nothing started."""
    result = _launch(str(tmp_path), "--hosts", "no-such-host.invalid:3", "--workers", "1",
                     "--ps", "1", script="raise SystemExit('must not start')")
    assert result.returncode == 2, result.stderr
    assert "cannot start the job, nothing was started: ssh to no-such-host.invalid failed" in result.stderr
    assert "fix: make `ssh no-such-host.invalid true` work without a password" in result.stderr
    assert "must not start" not in result.stdout + result.stderr


def test_elastic_horovod_gets_a_discovery_script_that_is_removed_afterwards(tmp_path, monkeypatch):
    record = tmp_path / "args"
    horovodrun = _fake_horovodrun(tmp_path, f"echo \"$@\" > {record}\n"
                                            "while [ $# -gt 0 ]; do\n"
                                            "  if [ \"$1\" = --host-discovery-script ] && [ -x \"$2\" ]; then\n"
                                            f"    echo present >> {record}\n"
                                            "  fi\n"
                                            "  shift\n"
                                            "done\n"
                                            "exit 5\n", monkeypatch)
    monkeypatch.setattr("tfdist.launch.commands.find_horovodrun", lambda *a, **k: str(horovodrun))
    result = CliRunner().invoke(launch, ["--backend", "horovod", "--elastic", "--min-np", "1", "--max-np", "2",
                                         "--hosts", "localhost:1,no-such-host.invalid:1", "--ssh-port", "2222",
                                         "--", "/bin/echo", "t.py"])
    assert result.exit_code == 5, result.output
    args, *discovered = record.read_text().splitlines()
    assert "--min-np 1 --max-np 2 --host-discovery-script " in args and args.endswith("/bin/echo t.py")
    assert "-np 1 --min-np 1" in args, "the job starts with --min-np ranks unless -np says more"
    assert "--network-interface" not in args
    assert discovered == ["present"]  # the discovery script existed while horovodrun ran
    script = Path(args.split("--host-discovery-script ")[1].split()[0])
    assert not script.exists() and not script.parent.exists()  # the workdir is removed afterwards
    assert "tfdist launch: horovodrun exited with code 5" in result.output


@pytest.mark.parametrize("args, message", [
    (["-np", "3", "--min-np", "1"], ("-np 3 needs 3 slots but --hosts a:1,b:1 gives 2; fix: add slots to --hosts, "
                                     "or drop -np (it defaults to --min-np 1)")),
    (["-np", "2", "--min-np", "1", "--max-np", "1"], "-np 2 is outside --min-np 1 .. --max-np 1"),
])
def test_elastic_horovod_refuses_a_start_size_it_would_wait_for_forever(tmp_path, monkeypatch, args, message):
    """Horovod waits for -np slots before training: more than --hosts has would wait 600 s, then fail."""
    horovodrun = tmp_path / "horovodrun"
    horovodrun.write_text(f"#!/bin/sh\ntouch {tmp_path / 'ran'}\n")
    horovodrun.chmod(0o755)
    monkeypatch.setattr("tfdist.launch.commands.find_horovodrun", lambda *a, **k: str(horovodrun))
    result = CliRunner().invoke(launch, ["--backend", "horovod", "--elastic", "--hosts", "a:1,b:1", *args, "--",
                                         "/bin/echo"])
    assert result.exit_code == 2, result.output
    assert message in result.output and not (tmp_path / "ran").exists()


# --- hostile arguments: refused before anything is reserved or started ------------------------------------

@pytest.fixture
def no_launch(monkeypatch):
    """The launchers replaced by recorders: a test that reaches one records it instead of starting tasks."""
    import tfdist.cli.launch as module

    calls = []
    monkeypatch.setattr(module, "_launch_tf_cluster", lambda *args, **_: calls.append(("tf", *args[:4])) or 0)
    monkeypatch.setattr(module, "_launch_horovod", lambda *args, **_: calls.append(("horovod", *args[2:4])) or 0)
    return calls


def _refused(args: list[str]) -> str:
    result = CliRunner().invoke(launch, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert result.output.rstrip("\n").endswith(line) and len(line) < 400, line[:500]
    return line


@pytest.mark.parametrize("args, message", [
    (["--workers", "1000000000"], "Error: Invalid value for '--workers': 1000000000 is not in the range "
                                  "1<=x<=10000 (tfdist's limit is 10,000 tasks per cluster); fix: give 1 to 10,000"),
    (["--ps", "10001"], "Error: Invalid value for '--ps': 10001 is not in the range 1<=x<=10000"),
    (["--workers", "9" * 5000], "Error: Invalid value for '--workers': '999999999999999999999999'... (5000 "
                                "characters) is not in the range"),
    (["--backend", "horovod", "-np", "10001"], "Error: Invalid value for '-np' / '--num-proc': 10001 is not in"),
    (["--workers", "9000", "--ps", "2000"], "Error: the cluster has 11,001 tasks (1 chief + 9000 worker(s) + "
                                            "2000 ps); tfdist's limit is 10,000 tasks per cluster; fix: "),
    (["--workers", "9999", "--evaluator"], "Error: the cluster has 10,002 tasks"),
])
def test_task_counts_are_bounded_by_the_tf_config_limit(no_launch, args, message):
    """`--workers 1000000000` used to reserve ports for 20 s, then die with EMFILE in free_ports."""
    assert _refused([*args, "--", "true"]).startswith(message)
    assert no_launch == []


def test_the_limit_is_tf_configs(no_launch):
    from tfdist.cli.launch import MAX_TASKS as LAUNCH_LIMIT
    from tfdist.cluster.limits import MAX_TASKS

    assert LAUNCH_LIMIT is MAX_TASKS
    result = CliRunner().invoke(launch, ["--workers", str(MAX_TASKS - 2), "--ps", "1", "--", "true"])
    assert result.exit_code == 0, result.output  # the largest cluster is not refused (and not started here)
    assert no_launch == [("tf", "parameter_server", ("true",), MAX_TASKS - 2, 1)]


@pytest.mark.parametrize("option", ["--grace", "--task-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "-1"])
def test_times_are_finite(no_launch, option, value):
    """--task-timeout nan used to be accepted: "the job ends in 0 s"."""
    line = _refused([option, value, "--", "true"])
    assert line.startswith(f"Error: Invalid value for '{option}': ") and "; fix: give a finite number from 0 to " \
        in line
    assert no_launch == []


@pytest.mark.parametrize("args, message", [
    (["--hosts", ""], "Error: --hosts is empty; fix: give e.g. --hosts h1:2,h2:2,h3:1, or drop --hosts to run "
                      "every task on this machine"),
    (["--hosts", "  "], "Error: --hosts is empty"),
    (["-H", ""], "Error: --hosts is empty"),
    (["--backend", "horovod", "--hosts", ""], "Error: --hosts is empty"),
    (["--hosts", "a:3", "--ps-hosts", ""], "Error: --ps-hosts is empty; fix: "),
    (["--hosts", "a:3", "--chief-host", ""], "Error: --chief-host is empty; fix: "),
    (["--hosts", "a:2,b:2", "--ps-hosts", "b,"], "Error: --ps-hosts 'b,' has an empty entry; fix: "),
    (["--backend", "horovod", "--network-interface", ""], "Error: --network-interface is empty; fix: "),
])
def test_an_empty_host_option_is_a_usage_error(no_launch, args, message):
    """`--hosts ''` used to run everything on this machine and exit 0; `--ps-hosts ''` said "or add  to --hosts"."""
    line = _refused([*args, "--", "true"])
    assert line.startswith(message), line
    assert "add  to" not in line and no_launch == []


def test_auto_checks_the_model_form_before_the_hosts(no_launch):
    """`--backend auto --model nocolon` used to complain about the missing --hosts."""
    line = _refused(["--backend", "auto", "--model", "nocolon", "--batch-size", "8", "--", "true"])
    assert line == ("Error: Invalid value for '--model': 'nocolon' is not MODULE:FUNCTION (no colon); fix: give "
                    "the function that builds the Keras model as MODULE:FUNCTION, e.g. models:build_model")


def test_valid_arguments_reach_the_launcher(no_launch):
    result = CliRunner().invoke(launch, ["--workers", "3", "--ps", "2", "--hosts", "a:3,b:2", "--", "true"])
    assert result.exit_code == 0, result.output
    assert no_launch == [("tf", "parameter_server", ("true",), 3, 2)]


def test_ports_that_cannot_be_reserved_are_a_usage_error_not_a_traceback(monkeypatch):
    import tfdist.cluster

    def exhausted(n, host="127.0.0.1"):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(tfdist.cluster, "free_ports", exhausted)
    line = _refused(["--workers", "2", "--bind-all", "--", "true"])
    assert line.startswith("Error: cannot reserve the cluster's ports on this machine, nothing was started (Too "
                           "many open files); fix: ")


def test_tasks_that_cannot_be_started_fail_the_run_in_one_line(monkeypatch):
    import tfdist.launch.local

    def cannot(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(tfdist.launch.local, "run_local_cluster", cannot)
    result = CliRunner().invoke(launch, ["--workers", "1", "--bind-all", "--", "true"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.splitlines()[-1].startswith(
        "Error: cannot start every task (Resource temporarily unavailable); the tasks already started were stopped")


def test_no_command_imports_another():
    """Commands share the library (tfdist.advise.render, ...), never each other's modules."""
    import ast

    commands = {"advise", "env", "launch", "report", "tf_config"}
    cli_dir = Path(__file__).resolve().parents[2] / "tfdist" / "cli"
    for name in commands:
        tree = ast.parse((cli_dir / f"{name}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        others = {f"tfdist.cli.{other}" for other in commands - {name}}
        assert not imported & others, f"tfdist/cli/{name}.py imports {sorted(imported & others)}"


# --- horovodrun's failures summed up in the last line --------------------------------------------------------

_RANK_FAILED = """\
Traceback (most recent call last):
  File "/venv/bin/horovodrun", line 8, in <module>
    sys.exit(run_commandline())
  File "/venv/lib/python3.11/site-packages/horovod/runner/gloo_run.py", line 284, in launch_gloo
    raise RuntimeError('Horovod detected that one or more processes exited with non-zero '
RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job to be terminated. The first process to do so was:
Process name: 1
Exit code: 2
"""
_NO_INTERFACE = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/horovod/runner/driver/driver_service.py", line 211, in get_local_interfaces
    raise ValueError('No interface is found for address 127.0.0.1.')
ValueError: No interface is found for address 127.0.0.1.
"""


@pytest.mark.parametrize("stderr, summary", [
    (_RANK_FAILED, "tfdist launch: horovodrun exited with code 1: rank 1 exited with code 2; its output is above"),
    (_NO_INTERFACE, "tfdist launch: horovodrun exited with code 1: ValueError: No interface is found for address "
                    "127.0.0.1.; its output is above"),
])
def test_a_horovodrun_traceback_passes_through_and_is_summed_up_last(tmp_path, monkeypatch, stderr, summary):
    (tmp_path / "stderr.txt").write_text(stderr)
    _fake_horovodrun(tmp_path, f"echo 'rank output' \ncat {tmp_path / 'stderr.txt'} >&2\nexit 1\n", monkeypatch)
    result = CliRunner().invoke(launch, ["--backend", "horovod", "-np", "2", "--", "/bin/echo", "t.py"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[-1] == summary
    assert "\n".join(lines[:-1]).endswith(stderr.rstrip("\n"))  # horovodrun's own output, unchanged, above


@pytest.mark.horovod
def test_a_failing_rank_of_real_horovodrun_is_named_in_the_last_line_and_ranks_keep_the_users_keras(tmp_path):
    """One real Horovod job for two checks. Rank 1 exits 2 (after rank 0 has reported): the last line names
    it. The caller leaves TF_USE_LEGACY_KERAS unset, as a Horovod user running Keras 3 does: every rank
    sees it unset and rank 0's `tf.keras` is Keras 3, what `horovodrun` gives (it passes its environment
    on unchanged). `tfdist launch` used to hand every rank the TF_USE_LEGACY_KERAS=1 that its own
    `import tfdist` had set, so the same script ran tf-keras under it."""
    script = ("import os, sys, time\n"
              "done = os.path.join(sys.argv[1], 'rank0-reported')\n"
              "print('keras-choice:', os.environ.get('TF_USE_LEGACY_KERAS'), flush=True)\n"
              "if os.environ.get('HOROVOD_RANK') == '1':\n"
              "    deadline = time.monotonic() + 200  # rank 0 imports TensorFlow first\n"
              "    while not os.path.exists(done) and time.monotonic() < deadline:\n"
              "        time.sleep(0.1)\n"
              "    sys.exit(2)\n"
              + _KERAS_REPORT + "open(done, 'w').close()\n")
    result = subprocess.run([sys.executable, "-m", "tfdist", "launch", "--backend", "horovod", "-np", "2", "--",
                             sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                            timeout=300, env=_without_keras_choice())
    assert result.returncode == 1, result.stderr[-3000:]
    assert "RuntimeError: Horovod detected that one or more processes exited" in result.stderr  # passed through
    assert result.stderr.strip().splitlines()[-1] == (
        "tfdist launch: horovodrun exited with code 1: rank 1 exited with code 2; its output is above")
    output = result.stdout + result.stderr
    assert [line.split("keras-choice:")[1].split() for line in output.splitlines()
            if "keras-choice:" in line] == [["None"], ["None"]], output[-3000:]
    assert [line.split("tf.keras-is:")[1].split() for line in output.splitlines()
            if "tf.keras-is:" in line] == [["None", "keras"]], output[-3000:]


@pytest.mark.cluster
def test_parameter_server_tasks_keep_the_users_keras(tmp_path):
    """A local parameter-server launch with TF_USE_LEGACY_KERAS unset in the caller: every task sees it
    unset, and the chief's `tf.keras` (a script that imports TensorFlow, not tfdist) is Keras 3, as it
    would be run by hand. Only the chief imports TensorFlow; its exit ends the job."""
    script = ("import json, os, sys, time\n"
              "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
              "print('keras-choice:', os.environ.get('TF_USE_LEGACY_KERAS'), flush=True)\n"
              "if task['type'] != 'chief':\n"
              "    time.sleep(600)\n"
              + _KERAS_REPORT)
    result = _launch(str(tmp_path), "--workers", "1", "--ps", "1", script=script, env=_without_keras_choice(),
                     timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    for task in ("chief:0", "worker:0", "ps:0"):
        assert any(line.startswith(f"[{task}]") and line.endswith("keras-choice: None") for line in lines), \
            result.stdout
    assert any(line.startswith("[chief:0]") and line.endswith("tf.keras-is: None keras") for line in lines), \
        result.stdout


def test_auto_with_an_optimizer_checks_the_probed_memory_and_passes_its_shards(monkeypatch, tmp_path):
    """`launch --backend auto --optimizer`: with 2 ps hosts capped at 3 GiB (their cgroups) a 128M-parameter
    table fits with shards=2, which every task gets in TFDIST_PLAN; capped at 1.5 GiB, and the workers too
    small for the whole model, nothing fits and nothing is launched (exit 2, the numbers in one line)."""
    import json

    import tfdist.cli.launch as module
    from tfdist.probe import driver as probe
    from tfdist.probe.host_memory import HostMemory
    from tfdist.plan import PLAN_ENV
    from tfdist.launch.hosts import parse_hosts

    monkeypatch.chdir(tmp_path)
    gib = 2**30
    hosts = ["w1", "w2", "p1", "p2"]
    caps = {}

    def fake(hosts_text, workers, ps, model=None, batch_size=None, **kwargs):
        links = [probe.LinkMeasure(a, b, (50e6 if "w2" in (a, b) else 2e9), 1e-4,
                                   HostMemory(None, caps.get(b, 16 * gib))) for a, b in probe.ring(hosts)]
        # one flat 512 MB variable: no weight matrix for PowerSGD, which would otherwise win on w2's link
        return probe.aggregate(parse_hosts(hosts_text), links, steps={"w1": 10.0, "w2": 100.0},
                               params=128_000_000, dtype_bytes=4, batch_size=batch_size,
                               variables=[((128_000_000,), 4)])

    launched = []
    monkeypatch.setattr(probe, "probe_hosts", fake)
    monkeypatch.setattr(module, "_launch_tf_cluster", lambda *args, **_: launched.append(args) or 0)
    monkeypatch.setattr(module, "_launch_horovod", lambda *args, **_: launched.append(args) or 0)
    argv = ["--backend", "auto", "--hosts", "w1:1,w2:1,p1:1,p2:1", "--ps", "2", "--model", "m:f",
            "--batch-size", "64", "--optimizer", "adagrad", "--", sys.executable, "train.py"]
    caps.update(p1=3 * gib, p2=3 * gib)
    result = CliRunner().invoke(launch, argv)
    assert result.exit_code == 0, result.output
    (call,) = launched
    assert call[:1] == ("parameter_server",) and call[2:4] == (2, 2)
    plan = json.loads(call[-1][PLAN_ENV])
    assert plan["options"] == {"shards": 2} and plan["inputs"]["ps_memory"] == 3 * gib
    assert "of the probed 3 GiB per ps: fits" in " ".join(result.output.split())
    launched.clear()
    caps.update(p1=3 * gib // 2, p2=3 * gib // 2, w1=3 * gib // 2, w2=3 * gib // 2)
    line = _refused(argv)
    assert line.startswith("Error: no backend fits in the probed hosts' memory: ") and launched == []
    assert "--ps-memory" not in line and "--worker-memory" not in line  # options --backend auto does not have
    assert "every worker holds the whole model: 3.57 GiB, above the probed 1.5 GiB of host w" in line
    assert "parameter_server: with 2 ps and shards=2 the fullest ps needs 1.66 GiB" in line
    assert "above the probed 1.5 GiB per ps; --ps 3 with shards=3 is the fewest that fit" in line


def test_auto_with_the_models_embedding_table_plans_for_the_rows_a_step_moves(monkeypatch, tmp_path):
    """`launch --backend auto --embedding 1Mx128`: on 50 Mbit/s links a 128M-parameter model moved whole
    every step is hopeless for every backend; told of the table, the plan predicts the rows a step moves
    (thousands of examples/s, not a few) and records the table in its inputs."""
    import json

    import tfdist.cli.launch as module
    from tfdist.probe import driver as probe
    from tfdist.plan import PLAN_ENV
    from tfdist.launch.hosts import parse_hosts

    monkeypatch.chdir(tmp_path)
    hosts = ["w1", "w2", "p1"]

    def fake(hosts_text, workers, ps, model=None, batch_size=None, **kwargs):
        links = [probe.LinkMeasure(a, b, 50e6, 1e-4) for a, b in probe.ring(hosts)]
        return probe.aggregate(parse_hosts(hosts_text), links, steps={"w1": 10.0, "w2": 10.0},
                               params=128_100_000, dtype_bytes=4, batch_size=batch_size)

    launched = []
    monkeypatch.setattr(probe, "probe_hosts", fake)
    monkeypatch.setattr(module, "_launch_tf_cluster", lambda *args, **_: launched.append(args) or 0)
    monkeypatch.setattr(module, "_launch_horovod", lambda *args, **_: launched.append(args) or 0)
    argv = ["--backend", "auto", "--hosts", "w1:1,w2:1,p1:1", "--ps", "1", "--model", "m:f", "--batch-size", "64",
            "--", sys.executable, "train.py"]
    rates = {}
    for extra in ((), ("--embedding", "1Mx128")):
        launched.clear()
        result = CliRunner().invoke(launch, [*argv[:-3], *extra, *argv[-3:]])
        assert result.exit_code == 0, result.output
        (call,) = launched
        plan = json.loads(call[-1][PLAN_ENV])
        rates[extra] = plan["predicted_examples_per_second"]
        assert plan["inputs"]["embeddings"] == ([{"rows": 1_000_000, "dim": 128, "lookups": 1}] if extra else [])
    assert rates[()] < 100 < 1000 < rates[("--embedding", "1Mx128")], rates
    assert "Embedding tables (sparse updates): 1,000,000 x 128" in " ".join(result.output.split())
    bad = CliRunner().invoke(launch, [*argv[:-3], "--embedding", "2Mx128", *argv[-3:]])
    assert bad.exit_code == 2 and "--embedding" in bad.output and "more than the model's" in bad.output, bad.output


# --- the tasks get the user's environment, not the one `import tfdist` changed (issue 34) -----------------

@pytest.fixture
def tfdist_chose_keras(monkeypatch):
    """This process as `tfdist` started without TF_USE_LEGACY_KERAS: `import tfdist` set it to 1."""
    import tfdist.keras_compat as keras_compat

    monkeypatch.setattr(keras_compat, "_USER_VALUE", None, raising=False)  # raising=False: also runs on the
    monkeypatch.setattr(keras_compat, "_set_by_tfdist", True, raising=False)  # code before the fix, and fails
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")


def test_horovodrun_gets_the_environment_without_the_variable_import_tfdist_set(tmp_path, monkeypatch,
                                                                                 tfdist_chose_keras):
    _fake_horovodrun(tmp_path, f"echo \"${{TF_USE_LEGACY_KERAS-unset}} $TFDIST_TEST_MINE\" > {tmp_path / 'env'}\n",
                     monkeypatch)
    monkeypatch.setenv("TFDIST_TEST_MINE", "kept")
    result = CliRunner().invoke(launch, ["--backend", "horovod", "-np", "2", "--", "/bin/echo", "t.py"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "env").read_text() == "unset kept\n"


def test_a_variable_the_user_set_reaches_horovodrun_unchanged(tmp_path, monkeypatch):
    _fake_horovodrun(tmp_path, f"echo \"${{TF_USE_LEGACY_KERAS-unset}}\" > {tmp_path / 'env'}\n", monkeypatch)
    for value in ("0", "1"):
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", value)
        result = CliRunner().invoke(launch, ["--backend", "horovod", "--", "/bin/echo", "t.py"])
        assert result.exit_code == 0, result.output
        assert (tmp_path / "env").read_text() == f"{value}\n"


@pytest.mark.parametrize("backend", ["parameter_server", "multi_worker_mirrored"])
def test_cluster_tasks_get_the_environment_without_the_variable_import_tfdist_set(monkeypatch, backend,
                                                                                   tfdist_chose_keras):
    import tfdist.launch.local as local

    seen = []
    monkeypatch.setattr(local, "run_local_cluster", lambda tasks, *args, **kwargs: seen.extend(tasks) or 0)
    result = CliRunner().invoke(launch, ["--backend", backend, "--workers", "1", "--", "/bin/echo", "t.py"])
    assert result.exit_code == 0, result.output
    assert seen and all("TF_USE_LEGACY_KERAS" not in task.env and "TF_CONFIG" in task.env for task in seen)


# --- hostile input that reached horovodrun's own tracebacks ------------------------------------------------

@pytest.mark.parametrize("name, why", [
    ("eth0;touch pwned", "is not an interface name"),
    ("$(id)", "is not an interface name"),
    ("eth0 eth1", "is not an interface name"),
    ("eth0,eth1", "names several interfaces"),
    ("a" * 16, "is longer than the 15 characters Linux allows"),
])
def test_a_network_interface_name_is_checked_before_horovodrun_starts(tmp_path, monkeypatch, name, why):
    _fake_horovodrun(tmp_path, f"touch {tmp_path / 'started'}\n", monkeypatch)
    line = _refused(["--backend", "horovod", "--network-interface", name, "--", "/bin/echo", "t.py"])
    assert line.startswith(f"Error: Invalid value for '--network-interface': {name!r} {why}"), line
    assert line.endswith("fix: give a name that `ip -brief link` lists, e.g. --network-interface eth0")
    assert not (tmp_path / "started").exists()


@pytest.mark.parametrize("backend", ["horovod", "parameter_server", "multi_worker_mirrored"])
@pytest.mark.parametrize("command", [["{python}", "trian.py"], ["{python}", "-u", "trian.py", "--epochs", "2"]])
def test_a_missing_script_is_named_before_anything_starts(tmp_path, monkeypatch, no_launch, backend, command):
    monkeypatch.chdir(tmp_path)
    argv = [part.format(python=sys.executable) for part in command]
    line = _refused(["--backend", backend, "--", *argv])
    assert line == (f"Error: Invalid value for COMMAND: the script 'trian.py' does not exist in {tmp_path}; fix: "
                    "check its name, or start tfdist launch from the folder that holds it")
    assert no_launch == []
    (tmp_path / "trian.py").write_text("")
    assert CliRunner().invoke(launch, ["--backend", backend, "--", *argv]).exit_code == 0
    assert len(no_launch) == 1


def test_a_missing_program_path_is_named(tmp_path, monkeypatch, no_launch):
    monkeypatch.chdir(tmp_path)
    line = _refused(["--backend", "horovod", "--", "./run.sh"])
    assert line.startswith(f"Error: Invalid value for COMMAND: './run.sh' does not exist (from {tmp_path}); fix: ")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    line = _refused(["--backend", "horovod", "--", "./run.sh"])
    assert line.startswith("Error: Invalid value for COMMAND: './run.sh' is not executable; fix: chmod +x ./run.sh")
    assert no_launch == []


# --- a count given under another backend's flag: the fix is that backend's flag ---------------------------

@pytest.mark.parametrize("args, fix", [
    (["--backend", "horovod", "--workers", "3"], "use -np 3 in place of --workers 3"),
    (["-np", "4"], "use --workers 4 in place of -np 4"),
    (["--backend", "multi_worker_mirrored", "-np", "4"], "use --workers 4 in place of -np 4"),
    (["--backend", "horovod", "--workers", "3", "--evaluator"],
     "use -np 3 in place of --workers 3; drop --evaluator, or pick the backend they belong to"),
])
def test_a_count_under_the_other_backends_flag_names_the_right_flag(no_launch, args, fix):
    line = _refused([*args, "--", "true"])
    assert line.endswith(f"; fix: {fix}"), line
    assert "drop --workers" not in line and "drop -np" not in line


# --- Ctrl-C while --backend auto probes: exit 130, as the launcher's own runners exit ---------------------

def test_ctrl_c_during_the_auto_probe_exits_130(tmp_path):
    """It exited 1 with click's `Aborted!`; an interrupted command exits 130, as the launcher's runners do."""
    code, stderr = interrupt_during_the_probe(tmp_path, [
        "launch", "--backend", "auto", "--hosts", "h1:1,h2:1,h3:1", "--model", "models:build_model", "--batch-size",
        "8", "--", sys.executable, "-c", "pass"])
    assert code == 130, stderr[-2000:]
    assert stderr.rstrip().splitlines()[-1] == "tfdist launch: interrupted", stderr[-2000:]
    assert "Aborted!" not in stderr and "Traceback" not in stderr


# --- --help is for the user; the details are in docs/cli.md ----------------------------------------------

def test_the_help_is_short_and_every_option_is_documented():
    from support import REPO

    result = CliRunner().invoke(launch, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert len(lines) <= 45, f"{len(lines)} lines"  # 117 before
    assert max(map(len, lines)) <= 100
    assert lines[-1].strip().endswith("docs/cli.md.")
    page = (REPO / "docs" / "cli.md").read_text()
    for param in launch.params:
        if isinstance(param, click.Option):
            assert param.opts[-1] in result.output
            assert any(f"`{opt}" in page for opt in param.opts), f"docs/cli.md does not describe {param.opts}"


@pytest.mark.parametrize("args, message", [
    (["--no-adapt"], "Error: --no-adapt do(es) not apply to --backend parameter_server; fix: drop --no-adapt"),
    (["--backend", "horovod", "--adapt-margin", "0.2"],
     "Error: --adapt-margin do(es) not apply to --backend horovod; fix: drop --adapt-margin"),
    (["--backend", "auto", "--no-adapt", "--adapt-margin", "0.2"],
     "Error: --adapt-margin and --no-adapt contradict each other; fix: --adapt-margin sets when an adaptive run "
     "switches; drop one"),
    (["--backend", "auto", "--adapt-margin", "1.5"], "Error: Invalid value for '--adapt-margin'"),
    (["--backend", "auto", "--adapt-margin", "nan"], "Error: Invalid value for '--adapt-margin'"),
])
def test_the_adaptive_options_belong_to_auto_and_are_checked(no_launch, args, message):
    line = _refused([*args, "--", "true"])
    assert line.startswith(message), line
    assert no_launch == []


def _fake_auto(monkeypatch, tmp_path, rate_bps: float, model: bool = True) -> tuple[list, list]:
    """``launch --backend auto`` on hosts w1, w2, p whose links the fake probe measures at ``rate_bps``
    (with ``model``: two even 10 ms steps of a 669,706-parameter model): ``(the probe's (model, batch)
    calls, each launched segment's environment)``, in ``tmp_path``."""
    import tfdist.cli.launch as module
    from tfdist.probe import driver as probe
    from tfdist.launch.hosts import parse_hosts

    monkeypatch.chdir(tmp_path)
    asked, launched = [], []

    def fake(hosts_text, workers, ps, model=None, batch_size=None, **kwargs):
        asked.append((model, batch_size))
        links = [probe.LinkMeasure(a, b, rate_bps, 1e-4) for a, b in probe.ring(["w1", "w2", "p"])]
        measured = dict(steps={"w1": 10.0, "w2": 10.0}, params=669_706, dtype_bytes=4, batch_size=batch_size)
        return probe.aggregate(parse_hosts(hosts_text), links, **(measured if model else {}))

    monkeypatch.setattr(probe, "probe_hosts", fake)
    monkeypatch.setattr(module, "_launch_tf_cluster", lambda *args, **_: launched.append(args[-1]) or 0)
    monkeypatch.setattr(module, "_launch_horovod", lambda *args, **_: launched.append(args[-1]) or 0)
    return asked, launched


def test_auto_adapts_unless_told_not_to(monkeypatch, tmp_path):
    """`--backend auto` hands every task the run folder (TFDIST_ADAPT) beside the plan, and the launcher
    answers each epoch there; `--no-adapt` leaves it out and keeps the plan."""
    from tfdist.run_channel import ADAPT_ENV

    _, launched = _fake_auto(monkeypatch, tmp_path, 2e9)
    argv = ["--backend", "auto", "--hosts", "w1:1,w2:1,p:1", "--ps", "1", "--model", "m:f", "--batch-size", "64",
            "--save-plan", "plan.json", "--", sys.executable, "train.py"]
    result = CliRunner().invoke(launch, argv)
    assert result.exit_code == 0, result.output
    assert launched[0][ADAPT_ENV] == str(tmp_path / "plan.run") and (tmp_path / "plan.run").is_dir()
    assert "tfdist launch: adaptive run: " in result.output  # no epoch came back: nothing was switched
    launched.clear()
    result = CliRunner().invoke(launch, [*argv[:-3], "--no-adapt", *argv[-3:]])
    assert result.exit_code == 0, result.output
    assert ADAPT_ENV not in launched[0] and "adaptive run" not in result.output


def test_auto_without_a_model_starts_from_a_first_guess_the_run_refits(monkeypatch, tmp_path):
    """The job is the probe (issue 36): `--backend auto --hosts ...` needs no --model and --batch-size;
    the links are probed, the model is a first guess said as such, and the run re-fits it on its own
    epochs. The memory check still needs the model itself."""
    import json

    from tfdist.auto.pipeline import FIRST_GUESS
    from tfdist.plan import PLAN_ENV

    asked, launched = _fake_auto(monkeypatch, tmp_path, 6.25e6, model=False)
    result = CliRunner().invoke(launch, ["--backend", "auto", "--hosts", "w1:1,w2:1,p:1", "--ps", "1", "--",
                                         sys.executable, "train.py"])
    assert result.exit_code == 0, result.output
    assert asked == [(None, None)]  # links only: no stand-in model timed
    assert (f"model: not measured (no --model); a first guess of {FIRST_GUESS['params']:,} params, 10 ms a step "
            "at batch 64, until the job's own epochs re-fit it") in result.output
    plan = json.loads(launched[0][PLAN_ENV])
    assert plan["inputs"]["params"] == FIRST_GUESS["params"] and plan["batch_size"] == 64
    assert plan["variant"] == "horovod_fp16"  # 50 Mbit/s links: the wire is the bottleneck
    for option in (["--optimizer", "adam"], ["--embedding", "1000x8"]):
        line = _refused(["--backend", "auto", "--hosts", "w1:1,w2:1,p:1", *option, "--", "true"])
        assert line.startswith(f"Error: {option[0]} needs --model: the memory check counts the model's own "
                               "variables; fix: "), line


def test_an_inherited_run_folder_never_reaches_the_tasks_of_another_auto_run(monkeypatch, tmp_path):
    """A TFDIST_ADAPT left in the environment (a shell that ran an adaptive task) must not make the
    tasks of a `--no-adapt` run, or of an adaptive run with its own folder, follow another run's folder."""
    from tfdist.run_channel import ADAPT_ENV

    _, launched = _fake_auto(monkeypatch, tmp_path, 2e9, model=False)
    monkeypatch.setenv(ADAPT_ENV, "/elsewhere/old.run")
    for extra in (["--no-adapt"], []):
        result = CliRunner().invoke(launch, ["--backend", "auto", "--hosts", "w1:1,w2:1,p:1", "--ps", "1", *extra,
                                             "--save-plan", "plan.json", "--", sys.executable, "train.py"])
        assert result.exit_code == 0, result.output
    assert ADAPT_ENV not in launched[0] and launched[1][ADAPT_ENV] == str(tmp_path / "plan.run")


def test_a_foreign_run_folder_is_refused_before_the_probe(monkeypatch, tmp_path):
    """--save-plan mine.json makes the run folder mine.run, which the launcher empties: a folder of
    that name that is not an adaptive run's is refused before anything is probed; --no-adapt runs."""
    asked, launched = _fake_auto(monkeypatch, tmp_path, 2e9, model=False)
    (tmp_path / "mine.run").mkdir()
    (tmp_path / "mine.run" / "notes.txt").write_text("keep me")
    argv = ["--backend", "auto", "--hosts", "w1:1,w2:1,p:1", "--ps", "1", "--save-plan", "mine.json", "--",
            sys.executable, "train.py"]
    result = CliRunner().invoke(launch, argv)
    assert result.exit_code == 2 and asked == [] and launched == [], result.output
    assert (f"Error: {tmp_path / 'mine.run'} exists and is not an adaptive run's folder (no .tfdist-run in it); "
            "fix: move it away, pass another --save-plan, or launch with --no-adapt") in result.output
    assert (tmp_path / "mine.run" / "notes.txt").read_text() == "keep me"
    result = CliRunner().invoke(launch, [*argv[:-3], "--no-adapt", *argv[-3:]])
    assert result.exit_code == 0 and len(asked) == 1, result.output
