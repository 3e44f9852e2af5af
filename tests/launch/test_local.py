"""The process side of the launcher: what every task is started with."""
from __future__ import annotations

import sys
import threading

import pytest

from tfdist.launch.local import _start
from tfdist.launch.plan import LaunchError

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
    from tfdist.launch.plan import TaskProcess
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
    from tfdist.launch.plan import TaskProcess
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
