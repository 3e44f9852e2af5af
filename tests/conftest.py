"""Shared fixtures.

* every test must leave ``os.environ`` as it found it;
* ``run_horovod`` starts a real ``horovodrun -np N -H localhost:N --gloo`` job.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

import pytest

import tfdist  # noqa: F401  (sets TF_USE_LEGACY_KERAS once, before the first snapshot below)

from support import horovodrun


def _snapshot() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's own


# Libraries that export variables of their own the first time they are imported
# (TensorFlow sets TF2_BEHAVIOR, TPU_ML_PLATFORM, ...): a test that first imports one may add them.
_SELF_CONFIGURING = ("tensorflow",)


@pytest.fixture(autouse=True)
def no_leaked_environment_variables():
    """Fail a test that adds, removes or changes an environment variable and leaves it so."""
    before = _snapshot()
    newly_imported = [name for name in _SELF_CONFIGURING if name not in sys.modules]
    yield
    after = _snapshot()
    if any(name in sys.modules for name in newly_imported):
        after = {k: v for k, v in after.items() if k in before}
    if before != after:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        for key in set(after) - set(before):
            del os.environ[key]
        os.environ.update(before)
        pytest.fail(f"test leaked environment variables: {changed}")


@pytest.fixture
def run_horovod() -> Callable[..., subprocess.CompletedProcess]:
    """``run_horovod(script, *args, np=2, timeout=240)``: a script of tests/scripts under horovodrun."""
    return horovodrun
