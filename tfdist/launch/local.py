"""Run a planned local cluster: prefixed output, the chief's exit code, no orphans.

Each task runs in its own process group; when the chief ends (or on Ctrl-C / SIGTERM) every
other group is sent SIGTERM, then SIGKILL after a grace period.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

from tfdist.launch.plan import TaskProcess

GRACE_SECONDS = 5.0


def _pump(stream: IO[bytes], prefix: bytes, sink: IO[bytes], lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            sink.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            sink.flush()
    stream.close()


def _terminate(processes: Sequence[subprocess.Popen], grace: float) -> None:
    """SIGTERM every live process group, then SIGKILL what is left after ``grace`` seconds."""
    alive = [p for p in processes if p.poll() is None]
    for process in alive:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for process in alive:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for process in processes:
        try:  # the group may hold grandchildren even when the leader is gone
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()


def run_local_cluster(tasks: Sequence[TaskProcess], grace: float = GRACE_SECONDS,
                      sink: IO[bytes] | None = None, wait_for_all: bool = False) -> int:
    """Start every task, stream its output as ``[type:index] line``, return the chief's exit code.

    The chief is the ``chief`` task, else ``worker:0``. With ``wait_for_all`` (peer workers of
    MultiWorkerMirroredStrategy, which all finish by themselves) every task is awaited and the
    first non-zero exit code wins; a failing task then stops the others.
    """
    sink = sink or sys.stdout.buffer
    lock = threading.Lock()
    started: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    chief: subprocess.Popen | None = None
    width = max(len(t.name) for t in tasks)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def stop(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    for sig in previous:
        signal.signal(sig, stop)
    try:
        for task in tasks:
            process = subprocess.Popen(list(task.command), env=dict(task.env), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
            started.append(process)
            prefix = f"[{task.name}]".ljust(width + 2).encode() + b" "
            pump = threading.Thread(target=_pump, args=(process.stdout, prefix, sink, lock), daemon=True)
            pump.start()
            pumps.append(pump)
            if task.task_type == "chief" or (chief is None and task.name == "worker:0"):
                chief = process
        if chief is None:
            raise ValueError("the plan has no chief task")
        code = _wait_all(started) if wait_for_all else chief.wait()
    except KeyboardInterrupt:
        code = 130
    finally:
        _terminate(started, grace)
        for pump in pumps:
            pump.join(timeout=5)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def _wait_all(processes: Sequence[subprocess.Popen], poll: float = 0.2) -> int:
    """Wait for every process; return 0, or the first non-zero exit code as soon as it appears."""
    while True:
        codes = [p.poll() for p in processes]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            return failed[0]
        if all(code == 0 for code in codes):
            return 0
        time.sleep(poll)


def run_command(command: Sequence[str]) -> int:
    """Run one command in the foreground (horovodrun) and return its exit code."""
    try:
        return subprocess.call(list(command))
    except KeyboardInterrupt:
        return 130
