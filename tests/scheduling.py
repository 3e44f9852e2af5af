"""How the suite shares two cores: `make test` runs it under pytest-xdist (``-n 2``).

* **Units.** Every test file is one unit of work, run whole on one worker, so its module- and
  session-scoped fixtures (a shared Horovod job, a shared cluster) run once. All multi-host tests are
  one unit, ``lab``: they run one after another on one worker, in their order, the leftover check
  (``tests/multihost/test_zz_nothing_left.py``) last. The lab unit is collected first (it is the
  longest), then the files with the most ``slow`` tests, so the long units start early; `make test`
  passes ``--no-loadscope-reorder`` so xdist keeps that order.
* **Alone.** A test marked ``alone`` measures speed or time (a probe of link rates and core speeds, a
  benchmark's predicted-against-measured rows): it starts only once no other test runs, and no other
  test starts until it ends. A readers-writer lock over two files (``flock``) does it: every test holds
  the run lock shared, an ``alone`` test holds it exclusively; an ``alone`` test first takes the turn
  lock exclusively, and tests take the turn lock (shared) before the run lock, so tests that start
  later queue behind a waiting ``alone`` test instead of starving it.

Without xdist (``pytest`` alone, `make test-fast`) nothing here changes what runs or in which order
but the collection order above, and the locks are uncontended.
"""
from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

LAB_UNIT = "lab"
LAB_PREFIX = "tests/multihost/"
ALONE = "alone"


def unit_of(nodeid: str) -> str:
    """The unit of work of a test id: ``lab`` for the multi-host tests, else its file."""
    path = nodeid.split("::", 1)[0]
    return LAB_UNIT if path.startswith(LAB_PREFIX) else path


def order_units(items: list[pytest.Item]) -> None:
    """The lab unit first, then files by their count of slow tests (stable: else collection order)."""
    slow: dict[str, int] = {}
    for item in items:
        unit = unit_of(item.nodeid)
        slow[unit] = slow.get(unit, 0) + (1 if item.get_closest_marker("slow") else 0)
    items.sort(key=lambda item: (unit_of(item.nodeid) != LAB_UNIT, -slow[unit_of(item.nodeid)]))


def make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduling with :func:`unit_of` as the scope (``pytest_xdist_make_scheduler``)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)


def lock_dir(config: pytest.Config) -> Path | None:
    """The directory of this run's locks, shared by its xdist workers; None when not under xdist."""
    worker_input = getattr(config, "workerinput", None)
    if worker_input is None:
        return None
    directory = Path(tempfile.gettempdir()) / f"tfdist-test-turns-{worker_input['testrunuid']}"
    directory.mkdir(exist_ok=True)
    return directory


@contextlib.contextmanager
def turn(directory: Path | None, alone: bool) -> Iterator[None]:
    """Hold the run lock: exclusively when ``alone``, else shared (see the module docstring)."""
    if directory is None:
        yield
        return
    with open(directory / "turn.lock", "a+") as turn_file, open(directory / "run.lock", "a+") as run_file:
        if alone:
            fcntl.flock(turn_file, fcntl.LOCK_EX)
            fcntl.flock(run_file, fcntl.LOCK_EX)
            fcntl.flock(turn_file, fcntl.LOCK_UN)
        else:
            fcntl.flock(turn_file, fcntl.LOCK_SH)
            fcntl.flock(run_file, fcntl.LOCK_SH)
            fcntl.flock(turn_file, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(run_file, fcntl.LOCK_UN)
