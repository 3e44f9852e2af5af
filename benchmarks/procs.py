"""Run benchmark processes with a deadline and leave nothing behind.

Every process gets its own session (process group, with the parent-death signal) and a unique
marker variable in its environment. Afterwards the groups are stopped (TERM, grace, KILL) and so is
any process that still carries the marker: horovodrun starts its ranks in sessions of their own,
which a group kill misses. Starting and stopping are tfdist.launch.processes', the one place.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
import time
import uuid
from typing import Mapping, Sequence

from tfdist.cluster.spec import free_ports
from tfdist.launch.processes import kill_marked, start_group, terminate

MARKER = "TFDIST_BENCH_RUN"
GRACE_SECONDS = 3.0
TAIL_LINES = 8


@dataclasses.dataclass
class RunResult:
    """What one benchmark run left: its exit code, its output and how long it took."""

    returncode: int | None  # None: killed at the deadline
    seconds: float
    output: str  # stdout + stderr of the chief (or of the whole horovodrun job)
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = TAIL_LINES) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def _start(command: Sequence[str], env: Mapping[str, str], log: str) -> subprocess.Popen:
    with open(log, "wb") as sink:
        return start_group(command, env=dict(env), stdout=sink, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL)


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


def _cleanup(processes: Sequence[subprocess.Popen], token: str) -> None:
    """Stop the groups (TERM, a grace period, KILL), then SIGKILL every marked straggler."""
    terminate(processes, GRACE_SECONDS)
    kill_marked(MARKER, token)


def _marked_env(env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    token = uuid.uuid4().hex
    return {**env, MARKER: token}, token


def run(command: Sequence[str], env: Mapping[str, str], timeout: float) -> RunResult:
    """Run ``command`` to completion or until ``timeout`` seconds, then clean up after it."""
    env, token = _marked_env(env)
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-") as tmp:
        log = os.path.join(tmp, "output.log")
        start = time.monotonic()
        process = _start(command, env, log)
        try:
            code: int | None = process.wait(timeout=timeout)
            note = ""
        except subprocess.TimeoutExpired:
            code, note = None, f"timed out after {timeout:.0f}s"
        finally:
            _cleanup([process], token)
        return RunResult(code, time.monotonic() - start, _read(log), note)


def run_ps_cluster(command: Sequence[str], env: Mapping[str, str], timeout: float,
                   workers: int = 2, ps: int = 1) -> RunResult:
    """Run ``command`` as chief, workers and ps tasks on localhost, each with its TF_CONFIG.

    Servers never exit by themselves: they are killed when the chief has finished, and the run
    fails early if one of them dies first.
    """
    env, token = _marked_env(env)
    tasks = [("chief", 0)] + [("worker", i) for i in range(workers)] + [("ps", i) for i in range(ps)]
    ports = iter(free_ports(len(tasks)))
    cluster: dict[str, list[str]] = {}
    for task_type, _ in tasks:
        cluster.setdefault(task_type, []).append(f"127.0.0.1:{next(ports)}")
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-") as tmp:
        started: list[tuple[str, subprocess.Popen, str]] = []
        start = time.monotonic()
        code: int | None = None
        note = ""
        try:
            for task_type, index in tasks:
                task_env = {**env, "GRPC_FAIL_FAST": "use_caller", "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": task_type, "index": index}})}
                log = os.path.join(tmp, f"{task_type}-{index}.log")
                started.append((f"{task_type}:{index}", _start(command, task_env, log), log))
            chief = started[0][1]
            while True:
                code = chief.poll()
                if code is not None:
                    break
                dead = [name for name, p, _ in started[1:] if p.poll() is not None]
                if dead:
                    note = f"{', '.join(dead)} exited before the chief finished"
                    break
                if time.monotonic() - start > timeout:
                    note = f"timed out after {timeout:.0f}s"
                    break
                time.sleep(0.2)
        finally:
            _cleanup([p for _, p, _ in started], token)
        output = _read(started[0][2]) if started else ""
        if note and len(started) > 1:
            output += "".join(f"\n--- {name} ---\n" + "\n".join(_read(log).splitlines()[-TAIL_LINES:])
                              for name, _, log in started[1:])
        return RunResult(code if not note else None, time.monotonic() - start, output, note)
