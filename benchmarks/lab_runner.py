"""The part of a lab benchmark's job runner that every lab benchmark shares: one job at a time,
started on host c, always stopped, and nothing of it left on the hosts afterwards.

    class Runner(LabRunner):
        hosts = ("c", "w1", "w2", "p1")
        def run(self, ...): code = self.run_job("c", argv, log_path, env, cwd, timeout); ...
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, Sequence

from tfdist.launch.processes import stop_process


class LabRunner:
    """Holds ``lab`` and the job's launcher ``process``; subclasses start jobs and set ``hosts``."""

    hosts: Sequence[str] = ()

    def __init__(self, lab) -> None:
        self.lab = lab
        self.process: subprocess.Popen | None = None
        self.count = 0

    def leftovers(self, timeout: float = 60) -> dict[str, list[str]]:
        """What of the job is still on the hosts after ``timeout`` s (sshd aside): empty when clean."""
        deadline = time.monotonic() + timeout
        while True:
            left = {host: found for host in self.hosts if (found := self.lab.task_processes(host))}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def run_job(self, host: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str], cwd: Path,
                timeout: float, during: ContextManager[Any] | None = None) -> int | None:
        """Start ``argv`` on ``host`` (its output to ``log_path``), wait up to ``timeout`` s inside
        ``during`` (e.g. a sampler of the hosts), always :meth:`stop` it: its exit code, None if it
        was still running."""
        with log_path.open("w") as handle:
            self.process = self.lab.popen(host, list(argv), stdout=handle, stderr=subprocess.STDOUT, env=dict(env),
                                          cwd=cwd)
        with during if during is not None else contextlib.nullcontext():
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
            finally:
                self.stop()

    def stop(self) -> None:
        """SIGTERM the launcher alone (it stops every task on every host; it shares this process's
        group), SIGKILL after 30 s."""
        process, self.process = self.process, None
        if process is not None:
            stop_process(process, grace=30)


def measure_interruptibly(measure: Callable[..., Any], *args: Any) -> bool:
    """Run ``measure(*args)``; on Ctrl-C (or SIGTERM turned into it) say so and return True: what was
    measured so far is reported, the job was stopped and the lab closed by the runner's clean-up."""
    try:
        measure(*args)
    except KeyboardInterrupt:
        print("interrupted: the job was stopped and the lab closed", file=sys.stderr, flush=True)
        return True
    return False


def sigterm_as_interrupt() -> None:
    """Turn the first SIGTERM into a KeyboardInterrupt, so that a benchmark stopped by its caller runs
    the same clean-up as Ctrl-C (``measure_interruptibly``); a second SIGTERM is ignored so that the
    clean-up is not cut short (not SIG_IGN, which the clean-up's own child processes would inherit)."""

    def interrupt(signum, frame):
        signal.signal(signal.SIGTERM, lambda *_: None)
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def git_commit(repo: Path) -> str | None:
    """The short commit of ``repo`` the benchmark ran, for its header; None outside a git checkout."""
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip() or None
