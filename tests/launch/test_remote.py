"""The ssh side of `tfdist launch --hosts`: command lines, forwarded environment, task specifications,
and the supervisor that stops its task when the launcher goes away (run here without ssh)."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from support import process_gone, subprocess_env
from tfdist.launch.remote import (
    SshOptions,
    TaskSpec,
    describe_failure,
    forwarded_env,
    is_local_host,
    ssh_command,
    supervisor_command,
)
from tfdist.launch import oom
from tfdist.launch.remote_task import RemoteTaskError, bind_address, decode_spec, preflight, report_exit


def test_ssh_command_never_prompts_and_quotes_the_remote_command():
    argv = ssh_command("h2", ["/venv/bin/python", "-m", "x", "a b"], SshOptions(2222, "/k/id"))
    assert argv[:5] == ["ssh", "-p", "2222", "-i", "/k/id"]
    assert "BatchMode=yes" in argv and "ServerAliveInterval=5" in argv and "ServerAliveCountMax=3" in argv
    assert argv[-2] == "h2"
    assert shlex.split(argv[-1]) == ["/venv/bin/python", "-m", "x", "a b"]
    plain = ssh_command("h2", ["python"])
    assert "-p" not in plain and "-i" not in plain


def test_a_host_of_this_machine_runs_the_supervisor_without_ssh():
    assert is_local_host("localhost") and is_local_host("127.0.0.1")
    assert not is_local_host("192.0.2.1")  # TEST-NET-1: never an address of this machine
    assert not is_local_host("no-such-host.invalid")
    assert supervisor_command("localhost", True, SshOptions(), python="/p") == ["/p", "-m",
                                                                                 "tfdist.launch.remote_task"]
    assert supervisor_command("h", False, SshOptions(), python="/p")[0] == "ssh"


def test_the_environment_is_forwarded_without_the_launchers_host_and_shell_variables():
    environ = {"PATH": "/bin", "PYTHONPATH": "/src", "LD_PRELOAD": "/x.so", "HOSTNAME": "login1", "PWD": "/a",
               "OLDPWD": "/b", "SHLVL": "2", "_": "/usr/bin/tfdist", "SSH_AUTH_SOCK": "/s",
               "SSH_CONNECTION": "c",
               "CUDA_VISIBLE_DEVICES": "0", "BASH_FUNC_f%%": "() { :; }", "TF_CONFIG": "{}",
               "TFDIST_BIND_ADDRESS": "1.2.3.4", "HOROVOD_SECRET_KEY": "k", "MY_SETTING": "1"}
    assert forwarded_env(environ) == {"PATH": "/bin", "PYTHONPATH": "/src", "LD_PRELOAD": "/x.so",
                                      "MY_SETTING": "1"}
    assert "HOSTNAME" in environ  # not mutated


def test_a_spec_survives_the_trip_and_a_bad_one_is_refused():
    argv = ("python", "t.py", "it's \"quoted\"")
    spec = TaskSpec("worker:1", argv, "/w", {"TF_CONFIG": '{"a": 1}'}, ("h2", 2222), 5.0)
    line = spec.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_spec(line) == {"name": "worker:1", "argv": list(argv), "cwd": "/w",
                                 "env": {"TF_CONFIG": '{"a": 1}'}, "bind": {"host": "h2", "port": 2222},
                                 "grace": 5.0}
    assert decode_spec(TaskSpec("ps:0", ("p",), "/", {}, None, 0).encode())["bind"] is None
    for bad, message in [(b"", "no task specification"), (b"{", "is not JSON"), (b"[]", "has fields"),
                         (b'{"name": "x", "argv": [], "cwd": "/", "env": {}, "bind": null, "grace": 1}',
                          "argv must be a non-empty list"),
                         (b'{"name": "x", "argv": ["p"], "cwd": "/", "env": {"A": 1}, "bind": {"host": "h"}, '
                          b'"grace": -1}', "env must map strings to strings; bind must be null")]:
        with pytest.raises(RemoteTaskError, match=message) as info:
            decode_spec(bad)
        assert "; fix: " in str(info.value)


def test_bind_address_refuses_loopback_names_and_foreign_addresses():
    assert bind_address("localhost") == "127.0.0.1"
    with pytest.raises(RemoteTaskError, match="resolves to the loopback address 127.0.1.1"):
        bind_address("node1", resolve=lambda host: "127.0.1.1")
    with pytest.raises(RemoteTaskError, match="which is not an address of the host"):
        bind_address("node1", resolve=lambda host: "192.0.2.1")
    with pytest.raises(RemoteTaskError, match="does not resolve"):
        bind_address("no-such-host.invalid")


def test_preflight_returns_free_ports_and_errors_as_data():
    answer = preflight(3, "localhost", shim=False)
    assert answer["error"] is None and answer["address"] == "127.0.0.1"
    assert len(set(answer["ports"])) == 3
    assert "does not resolve" in preflight(1, "no-such-host.invalid", shim=False)["error"]


def test_preflight_checks_the_working_directory_and_the_command_with_a_fix(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    ok = preflight(1, None, shim=False, cwd=str(tmp_path), command="./train.sh", path="/bin")
    assert ok["error"] is not None and "is not executable" in ok["error"] and ok["error"].endswith(
        f"fix: chmod +x {tmp_path}/train.sh")
    script.chmod(0o755)
    for command, path in [("./train.sh", "/nowhere"), (sys.executable, "/nowhere"),
                          ("python-for-test", str(tmp_path))]:
        if command == "python-for-test":
            (tmp_path / command).symlink_to(sys.executable)
        answer = preflight(1, None, shim=False, cwd=str(tmp_path), command=command, path=path)
        assert answer["error"] is None and len(answer["ports"]) == 1, (command, answer)
    for cwd, command, path, message in [
        (str(tmp_path / "missing"), "true", "/bin:/usr/bin",
         f"the working directory {tmp_path}/missing does"),
        (str(tmp_path), "no-such-command", "/bin:/usr/bin",
         "the command 'no-such-command' is not found on PATH"),
        (str(tmp_path), "./missing.sh", "/bin", f"the command './missing.sh' does not exist in {tmp_path}"),
    ]:
        error = preflight(1, None, shim=False, cwd=cwd, command=command, path=path)["error"]
        assert error is not None and error.startswith(message) and "; fix: " in error, error


def test_every_preflight_error_ends_with_a_fix(monkeypatch):
    from tfdist.cluster import spec

    def broken(count, host):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(spec, "free_ports", broken)
    error = preflight(1, None, shim=False)["error"]
    assert "Too many open files" in error and "; fix: " in error


def test_the_launcher_asks_each_host_about_the_directory_and_the_command():
    from tfdist.launch.remote import preflight_arguments

    assert preflight_arguments(2, "h2", True, "/w", "python", "/v/bin:/bin") == [
        "--preflight", "2", "--host", "h2", "--shim", "--cwd", "/w", "--command", "python",
        "--path", "/v/bin:/bin"]
    assert preflight_arguments(1, "h2", False) == ["--preflight", "1", "--host", "h2"]


@pytest.mark.parametrize("code, output, message", [
    (255, "ssh: connect to host h2 port 22: Connection refused", "ssh to h2 failed (ssh: connect to host h2"),
    (127, "bash: /venv/bin/python: No such file or directory", "/venv/bin/python does not exist on h2"),
    (1, "/venv/bin/python: No module named tfdist", "/venv/bin/python on h2 has no tfdist"),
])
def test_preflight_failures_name_the_host_and_the_fix(code, output, message):
    text = describe_failure("h2", code, output, "/venv/bin/python")
    assert text.startswith(message) and "; fix: " in text


# --- the supervisor, run locally as `python -m tfdist.launch.remote_task` ----------------------

_TASK = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
print('pgid', os.getpgid(0), 'pid', os.getpid(), 'child', child.pid, 'cwd', os.getcwd(),
      'x', os.environ.get('X'), flush=True)
time.sleep(600)
"""


def _supervisor(spec: TaskSpec) -> tuple[subprocess.Popen, dict[str, str]]:
    process = subprocess.Popen([sys.executable, "-m", "tfdist.launch.remote_task"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=subprocess_env())
    process.stdin.write(spec.encode())
    process.stdin.flush()
    words = process.stdout.readline().decode().split()
    return process, dict(zip(words[::2], words[1::2]))


def test_the_supervisor_stops_the_whole_task_group_when_its_stdin_ends(tmp_path):
    spec = TaskSpec("worker:0", (sys.executable, "-c", _TASK), str(tmp_path), {"X": "from-spec"}, None, 2.0)
    process, seen = _supervisor(spec)
    try:
        assert seen["cwd"] == str(tmp_path) and seen["x"] == "from-spec", seen
        assert seen["pgid"] == seen["pid"] != str(process.pid)  # its own process group
        start = time.monotonic()
        process.stdin.close()  # what the task sees when the launcher dies or the ssh connection drops
        assert process.wait(timeout=30) == 128 + signal.SIGTERM
        assert time.monotonic() - start < 20  # SIGTERM ended it; no hang
        deadline = time.monotonic() + 10
        pids = (int(seen["pid"]), int(seen["child"]))
        while time.monotonic() < deadline and not all(process_gone(pid) for pid in pids):
            time.sleep(0.1)
        assert all(process_gone(pid) for pid in pids), "the task's group outlived it"
    finally:
        process.kill()
        process.wait()
        for pid in (seen.get("pid"), seen.get("child")):
            if pid:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_the_supervisor_exits_with_the_tasks_code(tmp_path):
    spec = TaskSpec("chief:0", (sys.executable, "-c", "print('done', flush=True); raise SystemExit(7)"),
                    str(tmp_path), {}, None, 2.0)
    process = subprocess.Popen([sys.executable, "-m", "tfdist.launch.remote_task"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=subprocess_env())
    process.stdin.write(spec.encode())
    process.stdin.flush()  # and kept open: the launcher is still there
    try:
        assert process.wait(timeout=60) == 7
        assert process.stdout.read() == b"done\n"
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
        process.stdout.close()


def test_a_bad_spec_or_a_missing_directory_is_one_clear_line(tmp_path):
    spec = TaskSpec("chief:0", ("true",), str(tmp_path / "missing"), {}, None, 1.0)
    for data, message in [(b"not json\n", b"is not JSON"), (spec.encode(), b"No such file or directory")]:
        process = subprocess.run([sys.executable, "-m", "tfdist.launch.remote_task"], input=data,
                                 capture_output=True, timeout=60, env=subprocess_env())
        assert process.returncode == 2
        assert process.stderr.startswith(b"tfdist remote task on ") and message in process.stderr
        assert b"; fix: " in process.stderr


def test_preflight_prints_one_json_line():
    process = subprocess.run([sys.executable, "-m", "tfdist.launch.remote_task", "--preflight", "2", "--host",
                              "localhost"], capture_output=True, text=True, timeout=60, env=subprocess_env())
    answer = json.loads(process.stdout)
    assert process.returncode == 0 and len(answer["ports"]) == 2 and answer["error"] is None


def test_a_task_killed_by_sigkill_is_reported_in_one_marker_line_the_launcher_reads(tmp_path):
    task = "import os, signal; print('up', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    spec = TaskSpec("ps:0", (sys.executable, "-c", task), str(tmp_path), {}, None, 1.0)
    process = subprocess.Popen([sys.executable, "-m", "tfdist.launch.remote_task"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())
    process.stdin.write(spec.encode())
    process.stdin.flush()  # and kept open: the launcher is still there
    try:
        assert process.wait(timeout=60) == 128 + signal.SIGKILL
        markers = [line for line in process.stderr.read().decode().splitlines() if line.startswith(oom.EXIT_MARKER)]
        assert len(markers) == 1, markers
        signal_number, cause = oom.decode_exit(markers[0], "h3")
        # the counter of this machine's memory cgroup did not rise (no limit was hit), or cannot be read
        assert signal_number == signal.SIGKILL and cause.oom is not True and cause.host == "h3"
        assert process.stdout.read() == b"up\n"
    finally:
        process.kill()
        process.wait()
        process.stdin.close()


def test_the_marker_says_oom_when_the_counter_rose_and_nothing_when_the_supervisor_stopped_the_task():
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            lines.extend(part for part in text.splitlines() if part)

        def flush(self) -> None:
            pass

    before, after = oom.MemoryRecord("/g", 0, 1 << 30), oom.MemoryRecord("/g", 1, 1 << 30)
    report_exit(-9, False, before, after, Sink())
    assert [oom.decode_exit(line, "h3") for line in lines] == [(9, oom.KillCause(True, "h3", 1 << 30))]
    lines.clear()
    report_exit(-9, True, before, after, Sink())  # the supervisor's own SIGKILL after the grace
    report_exit(0, False, before, after, Sink())
    report_exit(1, False, before, after, Sink())
    assert lines == []
    report_exit(-15, False, before, after, Sink())  # another signal: reported, no memory verdict
    assert [oom.decode_exit(line, None) for line in lines] == [(15, oom.KillCause(False))]


def test_a_wrapper_shell_exiting_137_gets_a_marker_that_does_not_say_the_shell_was_killed(tmp_path):
    """`tfdist launch --hosts ... -- sh -c "python ..."`: the OOM killer ends python, sh exits 137."""
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            lines.extend(part for part in text.splitlines() if part)

        def flush(self) -> None:
            pass

    before, after = oom.MemoryRecord("/g", 0, 1 << 30), oom.MemoryRecord("/g", 1, 1 << 30)
    report_exit(137, False, before, after, Sink())
    assert [oom.decode_exit(line, "h3") for line in lines] == [(9, oom.KillCause(True, "h3", 1 << 30, exited=True))]
    lines.clear()
    report_exit(137, True, before, after, Sink())  # the supervisor stopped it: its own doing
    assert lines == []
    # the real supervisor reads its cgroup for such an exit and writes one marker; the code stays 137
    task = f"{sys.executable} -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'"
    spec = TaskSpec("ps:0", ("sh", "-c", task), str(tmp_path), {}, None, 1.0)
    process = subprocess.Popen([sys.executable, "-m", "tfdist.launch.remote_task"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())
    process.stdin.write(spec.encode())
    process.stdin.flush()  # and kept open: the launcher is still there
    try:
        assert process.wait(timeout=60) == 137
        markers = [line for line in process.stderr.read().decode().splitlines() if oom.EXIT_MARKER in line]
        assert len(markers) == 1, markers
        signal_number, cause = oom.decode_exit(markers[0], "h3")
        assert signal_number == signal.SIGKILL and cause.exited and cause.oom is not True
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
