"""Run a planned local cluster: prefixed output, the chief's exit code, no orphans.

Each task runs in its own process group; when the chief ends (or on Ctrl-C, SIGTERM or SIGHUP)
every other group is sent SIGTERM, then SIGKILL after a grace period. A stop signal only sets a
flag that the launcher polls, and teardown ignores further signals, so a second Ctrl-C cannot
interrupt it half-way; the tasks themselves start with default signal handling.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

from tfdist.launch.plan import TaskProcess

GRACE_SECONDS = 5.0
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it: a signal N becomes 128+N."""
    return 128 - returncode if returncode < 0 else returncode


class _SignalGuard:
    """Inside ``with``: a stop signal sets ``stopped``. ``quiet()`` ignores them (for teardown,
    which must finish); leaving the block restores the previous handlers."""

    def __enter__(self) -> "_SignalGuard":
        self.stopped = False

        def stop(signum, frame):  # noqa: ARG001
            self.stopped = True

        self._previous = {sig: signal.signal(sig, stop) for sig in _STOP_SIGNALS}
        return self

    def quiet(self) -> None:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def __exit__(self, *exc_info) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _start(command: Sequence[str], env: dict[str, str] | None, capture: bool) -> subprocess.Popen:
    return subprocess.Popen(list(command), env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                            stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.STDOUT if capture else None)


def _pump(stream: IO[bytes], prefix: bytes, sink: IO[bytes], lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            sink.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            sink.flush()
    stream.close()


def _terminate(processes: Sequence[subprocess.Popen], grace: float,
               first: signal.Signals = signal.SIGTERM) -> None:
    """Send ``first`` to every live process group, SIGKILL what is left after ``grace`` seconds."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, first)
    deadline = time.monotonic() + grace
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # the group may hold grandchildren
        process.wait()


def _wait(processes: Sequence[subprocess.Popen], chief: subprocess.Popen | None, guard: _SignalGuard,
          poll: float = 0.1) -> int:
    """The chief's exit code or, with ``chief=None``, 0 once all exited or the first non-zero
    one; 130 when a stop signal arrives first."""
    while not guard.stopped:
        if chief is not None:
            if chief.poll() is not None:
                return chief.returncode
        else:
            codes = [p.poll() for p in processes]
            failed = [code for code in codes if code not in (None, 0)]
            if failed:
                return failed[0]
            if all(code == 0 for code in codes):
                return 0
        time.sleep(poll)
    return 130


def run_local_cluster(tasks: Sequence[TaskProcess], grace: float = GRACE_SECONDS,
                      sink: IO[bytes] | None = None, wait_for_all: bool = False) -> int:
    """Start every task, stream its output as ``[type:index] line``, return the chief's exit code.

    The chief is the ``chief`` task, else ``worker:0``. With ``wait_for_all`` (peer workers of
    MultiWorkerMirroredStrategy, which all finish by themselves) every task is awaited and the
    first non-zero exit code wins; a failing task then stops the others. Raises ``OSError`` when
    the command cannot be started.
    """
    sink = sink or sys.stdout.buffer
    lock = threading.Lock()
    started: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    chief: subprocess.Popen | None = None
    width = max(len(t.name) for t in tasks)
    code = 130
    with _SignalGuard() as guard:
        try:
            for task in tasks:
                if guard.stopped:
                    break
                process = _start(task.command, dict(task.env), capture=True)
                started.append(process)
                prefix = f"[{task.name}]".ljust(width + 2).encode() + b" "
                pump = threading.Thread(target=_pump, args=(process.stdout, prefix, sink, lock), daemon=True)
                pump.start()
                pumps.append(pump)
                if task.task_type == "chief" or (chief is None and task.name == "worker:0"):
                    chief = process
            else:
                if chief is None:
                    raise ValueError("the plan has no chief task")
                code = _wait(started, None if wait_for_all else chief, guard)
        finally:
            guard.quiet()
            _terminate(started, grace)
            for pump in pumps:
                pump.join(timeout=5)
    return exit_code(code)


def run_command(command: Sequence[str], grace: float = GRACE_SECONDS) -> int:
    """Run one launcher command (horovodrun) and return its exit code.

    A stop signal is passed on as SIGINT, which horovodrun handles like Ctrl-C by stopping its
    ranks; SIGKILL follows after ``grace`` seconds.
    """
    with _SignalGuard() as guard:
        process = _start(command, None, capture=False)
        try:
            code = _wait([process], process, guard)
        finally:
            guard.quiet()
            _terminate([process], grace, first=signal.SIGINT)
    return exit_code(code)
