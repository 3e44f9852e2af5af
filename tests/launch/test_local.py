"""The process side of the launcher: what every task is started with."""
from __future__ import annotations

import sys
import threading

import pytest

from tfdist.launch.local import _start
from tfdist.launch.commands import LaunchError

_READ_PDEATHSIG = ("import ctypes\n"
                   "sig = ctypes.c_int()\n"
                   "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG\n"
                   "print(sig.value)\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_every_task_gets_sigterm_when_the_launcher_dies():
    process = _start([sys.executable, "-c", _READ_PDEATHSIG], None, capture=True)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert output.decode().strip() == "15"  # SIGTERM


def test_tasks_are_started_from_the_main_thread_only():
    """The parent-death signal fires when the *thread* that forked exits, not the process."""
    errors: list[BaseException] = []

    def start() -> None:
        try:
            _start([sys.executable, "-c", "pass"], None, capture=False).wait()
        except LaunchError as exc:
            errors.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(timeout=60)
    assert len(errors) == 1 and "must be started from the main thread" in str(errors[0])
    assert "; fix: " in str(errors[0])


# --- a task the OOM killer ended: the job ends at once with one line (tfdist.launch.oom) -------------
_SLEEP = (sys.executable, "-c", "import time; time.sleep(120)")


def _oom_job(ps_command: tuple[str, ...], ps_on_host: bool,
             timeout: float = 600) -> tuple[int, list[str], bytes, float]:
    """A chief and a worker that sleep, and ``ps_command`` as ps:0 (a supervisor on host h3 when
    ``ps_on_host``): the exit code, the launcher's lines, the tasks' output and the seconds it took."""
    import io
    import os
    import time

    from tfdist.launch.local import run_local_cluster
    from tfdist.launch.commands import TaskProcess
    from tfdist.launch.policy import ParameterServerPolicy

    env = dict(os.environ)
    tasks = [TaskProcess("chief", 0, _SLEEP, env), TaskProcess("worker", 0, _SLEEP, env),
             TaskProcess("ps", 0, ps_command, env, host="h3" if ps_on_host else None,
                         stdin=b"{}\n" if ps_on_host else None)]
    lines: list[str] = []
    sink = io.BytesIO()
    start = time.monotonic()
    code = run_local_cluster(tasks, ParameterServerPolicy([t.name for t in tasks], timeout=timeout), grace=1,
                             sink=sink, report=lines.append)
    return code, lines, sink.getvalue(), time.monotonic() - start


def test_an_oom_killed_ps_on_a_host_ends_the_job_at_once_with_the_supervisors_finding():
    from tfdist.launch import oom

    marker = oom.encode_exit(9, oom.KillCause(True, None, 768 << 20))
    fake_supervisor = (sys.executable, "-c", f"import sys; print('serving', flush=True); "
                       f"print({marker!r}, file=sys.stderr, flush=True); sys.exit(137)")
    code, lines, output, seconds = _oom_job(fake_supervisor, ps_on_host=True)
    assert code == 1, lines
    memory = [line for line in lines if "memory" in line]
    assert len(memory) == 1, lines
    assert memory[0].startswith("ps:0 on h3 ran out of memory: the kernel's OOM killer killed it (SIGKILL) at "
                                "its memory limit of 768 MiB") and "; fix: " in memory[0]
    assert seconds < 300  # not the 600 s task timeout: a bound against a hang only
    assert b"serving" in output and oom.EXIT_MARKER.encode() not in output  # the marker is not shown


def test_a_local_task_killed_by_sigkill_is_checked_against_the_launchers_memory_cgroup(monkeypatch):
    from tfdist.launch import local, oom

    readings = iter([oom.MemoryRecord("/job", 0, 1 << 30), oom.MemoryRecord("/job", 1, 1 << 30)])
    monkeypatch.setattr(local.oom, "snapshot", lambda: next(readings))
    suicide = (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    code, lines, _, _ = _oom_job(suicide, ps_on_host=False)
    assert code == 1
    assert lines[0].startswith("ps:0 on this machine ran out of memory: the kernel's OOM killer killed it "
                               "(SIGKILL) at its memory limit of 1.00 GiB"), lines


def test_a_local_sigkill_without_a_readable_cgroup_points_at_dmesg(monkeypatch):
    from tfdist.launch import local

    monkeypatch.setattr(local.oom, "snapshot", lambda: None)
    suicide = (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    code, lines, _, _ = _oom_job(suicide, ps_on_host=False, timeout=0.5)
    assert lines[0].startswith("ps:0 killed by SIGKILL (the kernel's OOM killer is the usual cause: check "
                               "`dmesg` on this machine); training cannot go on"), lines
    assert code == 1 and lines[0].endswith("so the job ends in 0 s unless the chief exits first")


def test_a_chief_that_fails_first_does_not_hide_the_ps_that_ran_out_of_memory():
    """The chief sees the ps vanish and may exit before the launcher reads the ps's exit: its line
    still comes, and the job keeps the chief's exit code."""
    import io
    import os

    from tfdist.launch import oom
    from tfdist.launch.local import run_local_cluster
    from tfdist.launch.commands import TaskProcess
    from tfdist.launch.policy import ParameterServerPolicy

    env = dict(os.environ)
    marker = oom.encode_exit(9, oom.KillCause(True, None, 768 << 20))
    ps = (sys.executable, "-c", f"import sys, time; time.sleep(0.2); print({marker!r}, file=sys.stderr, "
          "flush=True); sys.exit(137)")
    tasks = [TaskProcess("chief", 0, (sys.executable, "-c", "raise SystemExit(3)"), env),
             TaskProcess("worker", 0, _SLEEP, env), TaskProcess("ps", 0, ps, env, host="h3", stdin=b"{}\n")]
    lines: list[str] = []
    code = run_local_cluster(tasks, ParameterServerPolicy([t.name for t in tasks], timeout=600), grace=1,
                             sink=io.BytesIO(), report=lines.append)
    assert code == 3, lines
    assert "chief:0 exited with code 3" in lines
    assert any(line.startswith("ps:0 on h3 ran out of memory") for line in lines), lines


def test_a_marker_glued_to_a_progress_bar_is_still_read_and_the_bar_still_shown():
    """The task's stdout and the supervisor's stderr share one pipe: a Keras progress bar without a
    trailing newline puts the marker in the middle of a line."""
    import io

    from tfdist.launch import oom
    from tfdist.launch.local import _pump

    marker = oom.encode_exit(9, oom.KillCause(True, None, 768 << 20))
    bar = b"  3/100 [>.............................] - ETA: 41s - loss: 0.69\r  4/100 [>....] - loss: 0.68"
    stream = io.BytesIO(b"serving\n" + bar + marker.encode() + b"\n" + f"x {oom.EXIT_MARKER}y\n".encode())
    sink, seen = io.BytesIO(), []
    _pump(stream, b"[ps:0@h3] ", sink, threading.Lock(), seen.append)
    assert seen == [marker]
    # the bar is shown, ended; text that only looks like a marker is output, not dropped
    assert sink.getvalue() == b"[ps:0@h3] serving\n[ps:0@h3] " + bar + b"\n" + \
        f"[ps:0@h3] x {oom.EXIT_MARKER}y\n".encode()


def _exits_after(readings: list, monkeypatch):
    from tfdist.launch import local

    values = iter(readings)
    monkeypatch.setattr(local.oom, "snapshot", lambda: next(values))
    return local._Exits(next(values))


def test_after_one_oom_kill_a_later_sigkill_in_the_job_is_not_called_out_of_memory(monkeypatch):
    """Each exit is compared with the reading taken before it, not with the one at the job's start."""
    from tfdist.launch import oom
    from tfdist.launch.commands import TaskProcess

    exits = _exits_after([oom.MemoryRecord("/job", 0, 1 << 30), oom.MemoryRecord("/job", 1, 1 << 30),
                          oom.MemoryRecord("/job", 1, 1 << 30), oom.MemoryRecord("/job", 2, 1 << 30)], monkeypatch)
    worker, ps = TaskProcess("worker", 0, ("w",), {}), TaskProcess("ps", 0, ("p",), {})
    code, kill = exits.cause(worker, -9)
    assert code == -9 and kill == oom.KillCause(True, None, 1 << 30)
    assert exits.cause(ps, -9) == (-9, None)  # killed by hand: the counter did not rise since worker:0's exit
    assert exits.cause(TaskProcess("chief", 0, ("c",), {}), -9)[1].oom  # it rose again: this one's


def test_a_local_wrapper_shell_exiting_137_is_checked_against_the_memory_cgroup(monkeypatch):
    """`tfdist launch -- sh -c "python ..."`: the shell exits 137 when its python is OOM-killed."""
    from tfdist.launch import local, oom

    readings = iter([oom.MemoryRecord("/job", 0, 1 << 30), oom.MemoryRecord("/job", 1, 1 << 30)])
    monkeypatch.setattr(local.oom, "snapshot", lambda: next(readings))
    wrapper = ("sh", "-c", f"{sys.executable} -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'")
    code, lines, _, seconds = _oom_job(wrapper, ps_on_host=False)
    assert code == 1, lines
    assert lines[0].startswith("ps:0 on this machine ran out of memory: the kernel's OOM killer killed a process "
                               "it started (SIGKILL) at its memory limit of 1.00 GiB (1073741824 bytes), so it "
                               "exited with code 137; training cannot go on without the variables a ps task "
                               "holds, so the job ends now; fix: "), lines
    assert seconds < 300  # not the 600 s task timeout: a bound against a hang only
    monkeypatch.setattr(local.oom, "snapshot", lambda: None)  # no cgroup to read: 137 is only a suspect
    exits = local._Exits(None)
    code, kill = exits.cause(local.TaskProcess("ps", 0, wrapper, {}), 137)
    assert code == 137 and kill == oom.KillCause(None, exited=True)
    assert exits.cause(local.TaskProcess("ps", 0, wrapper, {}), 1) == (1, None)


# --- a job whose work is done though tasks still run (an adaptive run's chief left: issue 36) ----------
def _leaves_then_lingers(marker) -> tuple[str, ...]:
    """A task that writes ``marker`` (its work done) and then lingers, as a straggler's teardown does;
    left alone it would end with code 0 after 60 s, and the launcher would not have stopped it."""
    return (sys.executable, "-c", f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(60)")


def test_a_cluster_is_stopped_with_code_0_once_its_work_is_done(tmp_path):
    import io
    import os

    from tfdist.launch.commands import TaskProcess
    from tfdist.launch.local import run_local_cluster
    from tfdist.launch.policy import ParameterServerPolicy

    marker = tmp_path / "left"
    env = dict(os.environ)
    tasks = [TaskProcess("chief", 0, _leaves_then_lingers(marker), env), TaskProcess("worker", 0, _SLEEP, env),
             TaskProcess("ps", 0, _SLEEP, env)]
    lines: list[str] = []
    code = run_local_cluster(tasks, ParameterServerPolicy([t.name for t in tasks], timeout=600), grace=1,
                             sink=io.BytesIO(), report=lines.append, finished=marker.exists)
    assert code == 0 and lines == ["stopped chief:0, worker:0, ps:0"], lines


def test_a_launcher_command_is_stopped_with_code_0_once_its_work_is_done(tmp_path):
    from tfdist.launch.local import run_command

    marker = tmp_path / "left"
    lines: list[str] = []
    code = run_command(list(_leaves_then_lingers(marker)), grace=1, report=lines.append, name="horovodrun",
                       finished=marker.exists)
    assert code == 0 and lines == ["horovodrun stopped: the job's work was done"], lines
