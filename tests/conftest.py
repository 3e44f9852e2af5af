"""Shared fixtures.

* every test must leave ``os.environ`` as it found it;
* ``run_horovod`` starts a real ``horovodrun -np N -H localhost:N --gloo`` job.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

import tfdist  # noqa: F401  (sets TF_USE_LEGACY_KERAS once, before the first snapshot below)

from support import SCRIPTS, REPO, subprocess_env


def _snapshot() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's own


@pytest.fixture(autouse=True)
def no_leaked_environment_variables():
    """Fail a test that adds, removes or changes an environment variable and leaves it so."""
    before = _snapshot()
    yield
    after = _snapshot()
    if before != after:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        for key in set(after) - set(before):
            del os.environ[key]
        os.environ.update(before)
        pytest.fail(f"test leaked environment variables: {changed}")


@pytest.fixture
def run_horovod() -> Callable[..., subprocess.CompletedProcess]:
    """``run_horovod(script, *args, np=2, timeout=240)`` runs a script of tests/scripts under horovodrun."""
    horovodrun = shutil.which("horovodrun", path=str(Path(sys.executable).parent)) or shutil.which("horovodrun")
    if horovodrun is None:
        pytest.fail("horovodrun is not installed; run `make setup`")

    def run(script: str, *args: str, np: int = 2, timeout: float = 240,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        command = [horovodrun, "-np", str(np), "-H", f"localhost:{np}", "--gloo",
                   sys.executable, str(SCRIPTS / script), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                env=subprocess_env(**(env or {})), cwd=REPO)
        return result

    return run
