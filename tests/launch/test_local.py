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
