"""`tfdist launch ... --hosts` jobs started on a lab host, their output lines read as they arrive
(the multi-host tests share it: tests/multihost is not a package)."""
from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest

from support import REPO, SCRIPTS, subprocess_env

JOB_TIMEOUT = 420.0  # s: a launcher still running then has hung


class Launch:
    """`tfdist launch OPTIONS -- python SCRIPT ARGS` started on h0; its output lines with arrival times."""

    def __init__(self, lab, *options: str, script: str, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        """``script``: a file in tests/scripts, or Python source given to ``python -c``; ``env`` is
        added to the launcher's environment (which it forwards to every task)."""
        program = [str(SCRIPTS / script)] if script.endswith(".py") else ["-c", script]
        argv = [sys.executable, "-m", "tfdist", "launch", *options, "--ssh-port", str(lab.ssh_port),
                "--ssh-identity-file", str(lab.identity_file), "--grace", "2", "--",
                sys.executable, *program, *args]
        self.lines: list[tuple[float, str]] = []  # (monotonic time of arrival, line)
        self.start = time.monotonic()
        self.process = lab.popen("h0", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=subprocess_env(**(env or {})), cwd=REPO)
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait(self, timeout: float = JOB_TIMEOUT) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the launcher was still running after {timeout:.0f} s:\n{self.tail()}")
        self._pump.join(timeout=10)
        return code

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def tail(self, n: int = 60) -> str:
        return "\n".join(line for _, line in self.lines[-n:])

    def first(self, pattern: str) -> float | None:
        """When the first line matching ``pattern`` arrived (monotonic time), or None."""
        return next((at for at, line in self.lines if re.search(pattern, line)), None)

    def seconds(self, pattern: str) -> float | None:
        """Seconds from the start to the first line matching ``pattern``, or None."""
        at = self.first(pattern)
        return None if at is None else at - self.start

    def await_line(self, pattern: str, timeout: float = 300) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            at = self.first(pattern)
            if at is not None:
                return at
            time.sleep(0.1)
        at = self.first(pattern)
        if at is None:
            pytest.fail(f"no line matching {pattern!r} (launcher exit code {self.process.poll()}):\n"
                        f"{self.tail()}")
        return at
