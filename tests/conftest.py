"""Shared fixtures.

* the suite runs on the CPU: GPUs are hidden (before TensorFlow loads) unless TFDIST_TEST_GPUS=1, so a
  machine with GPUs runs the same checks, to the same tolerances, as CI; with TFDIST_TEST_GPUS=1 the
  tests marked ``no_gpu`` (they assume none) are skipped; TensorFlow gets one intra-op thread
  (``TF_NUM_INTRAOP_THREADS``, unless set);
* every test must leave ``os.environ`` as it found it;
* ``horovod``, ``cluster`` and ``multihost`` tests are ``slow`` too (``make test-fast`` leaves ``slow`` out);
* ``run_horovod`` starts a real ``horovodrun -np N -H localhost:N --gloo`` job;
* under pytest-xdist (`make test`: ``-n 2``) each file is one unit of work, the lab tests one unit, the
  files that share the examples' jobs (``shared_run``) one unit
  (``scheduling.py``).
"""
from __future__ import annotations

import os
import subprocess
from typing import Callable

import pytest

if os.environ.get("TFDIST_TEST_GPUS") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before TensorFlow loads; inherited by every subprocess
# One intra-op thread per TensorFlow process: the suite's models are tiny and two tests share two cores
# (`make test` runs 2 workers), so more threads only spin against each other. Inherited by subprocesses.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import tfdist  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS once, before the first snapshot below)

import scheduling  # noqa: E402
from support import horovodrun  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # after tests/multihost/conftest.py's (also tryfirst, registered later)
def pytest_collection_modifyitems(config, items):
    gpus_visible = os.environ.get("TFDIST_TEST_GPUS") == "1"
    for item in items:
        if any(item.get_closest_marker(name) for name in ("horovod", "cluster", "multihost")):
            item.add_marker(pytest.mark.slow)
        if gpus_visible and item.get_closest_marker("no_gpu"):
            item.add_marker(pytest.mark.skip(reason="assumes no visible GPU; TFDIST_TEST_GPUS=1 shows them"))
    scheduling.order_units(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return scheduling.make_scheduler(config, log)


_UNIT_CLOCK = scheduling.UnitClock()


def pytest_runtest_logreport(report):
    """On the xdist controller: each test phase's time, by unit and worker (``scheduling.UnitClock``)."""
    node = getattr(report, "node", None)  # set on reports a worker sent to the controller
    if node is not None:
        _UNIT_CLOCK.add(report.nodeid, node.gateway.id, report.duration)


def pytest_terminal_summary(terminalreporter):
    lines = _UNIT_CLOCK.lines()
    if lines:
        terminalreporter.write_sep("=", "time per worker and the longest units (tests/scheduling.py)")
        for line in lines:
            terminalreporter.write_line(line)


def _snapshot() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's own


# Variables TensorFlow (and h5py under it) and Keras 3 (KMP_*, for OpenMP) export the first time they
# are imported: a test that first imports them may add these, and only these.
_IMPORT_VARIABLES = frozenset({"ENABLE_RUNTIME_UPTIME_TELEMETRY", "HDF5_PLUGIN_PATH", "TF2_BEHAVIOR",
                               "TPU_ML_PLATFORM", "TPU_ML_PLATFORM_VERSION",
                               "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK"})


@pytest.fixture(autouse=True)
def no_leaked_environment_variables():
    """Fail a test that adds, removes or changes an environment variable and leaves it so."""
    before = _snapshot()
    yield
    after = {k: v for k, v in _snapshot().items() if k in before or k not in _IMPORT_VARIABLES}
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


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory):
    """``shared_run(case)``: an example case's run and directory from the one job its launcher and backend
    share (tests/example_jobs.py), for tests/examples/test_examples.py and tests/report/test_real_runs.py:
    one unit of work (``scheduling.SHARED_UNITS``), so each job starts once for both."""
    from example_jobs import shared_jobs

    return shared_jobs(tmp_path_factory)
