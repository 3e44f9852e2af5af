"""How the suite shares two cores: `make test` runs it under pytest-xdist (``-n 2``).

* **Units.** Every test file is one unit of work, run whole on one worker, so its module- and
  session-scoped fixtures (a shared Horovod job, a shared cluster) run once. All multi-host tests are
  one unit, ``lab``: they run one after another on one worker, in their order, the leftover check
  (``tests/multihost/test_zz_nothing_left.py``) last. The lab unit is collected first (it is the
  longest), then the files with the most ``slow`` tests, so the long units start early; `make test`
  passes ``--no-loadscope-reorder`` so xdist keeps that order.
* **Alone.** A test marked ``alone`` measures speed or time (a probe of link rates and core speeds, a
  benchmark's predicted-against-measured rows): it starts only once no other test runs, and no other
  test starts until it ends. A readers-writer lock over two files (``flock``) in a directory the
  controller makes and removes does it: a worker holds the run lock shared from the first test of a
  unit to its last (a module fixture's processes live between its tests), an ``alone`` test holds
  it exclusively; an ``alone`` test first takes the turn lock exclusively, and a unit takes the turn
  lock (shared) before the run lock, so units that start later queue behind a waiting ``alone`` test
  instead of starving it. The price: an ``alone`` test waits for the other worker's unit to end.

Without xdist (``pytest`` alone, `make test-fast`) nothing here changes what runs or in which order
but the collection order above, and the locks are uncontended.
"""
from __future__ import annotations

import contextlib
import fcntl
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

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


_LOCKS = pytest.StashKey[Path]()
_TURNS = pytest.StashKey["Turns"]()
WORKER_INPUT_KEY = "tfdist_turns"


def lock_dir_for_workers(config: pytest.Config) -> str:
    """On the controller: this run's lock directory (made once; :func:`remove_lock_dir` removes it)."""
    if _LOCKS not in config.stash:
        config.stash[_LOCKS] = Path(tempfile.mkdtemp(prefix="tfdist-test-turns-"))
    return str(config.stash[_LOCKS])


def remove_lock_dir(config: pytest.Config) -> None:
    """On the controller, once the workers are gone: the lock directory and its two files."""
    directory = config.stash.get(_LOCKS, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def turns(config: pytest.Config) -> Turns:
    """This process's :class:`Turns` (a worker's, or one that locks nothing outside xdist)."""
    if _TURNS not in config.stash:
        worker_input = getattr(config, "workerinput", None) or {}
        directory = worker_input.get(WORKER_INPUT_KEY)
        config.stash[_TURNS] = Turns(None if directory is None else Path(directory))
    return config.stash[_TURNS]


class Turns:
    """One worker's hold on the run lock (module docstring): shared from the first test of a unit
    until its last (so processes a module fixture keeps between tests count), exclusive around an
    ``alone`` test. ``directory`` None: nothing is locked."""

    def __init__(self, directory: Path | None) -> None:
        self._directory = directory
        self._files: tuple[IO[str], IO[str]] | None = None
        self._shared = False

    @contextlib.contextmanager
    def hold(self, unit: str, next_unit: str | None, alone: bool) -> Iterator[None]:
        """Around one test of ``unit``; ``next_unit``: the unit of the test after it (None: last)."""
        if self._directory is None:
            yield
            return
        if alone:
            self._release()  # a shared hold first: two alone tests must not wait on each other's
            self._take(fcntl.LOCK_EX)
        elif not self._shared:
            self._take(fcntl.LOCK_SH)
            self._shared = True
        try:
            yield
        finally:
            if alone or next_unit != unit:
                self._release()

    def _take(self, mode: int) -> None:
        if self._files is None:
            self._files = (open(self._directory / "turn.lock", "a+"), open(self._directory / "run.lock", "a+"))
        turn_file, run_file = self._files
        fcntl.flock(turn_file, fcntl.LOCK_EX if mode == fcntl.LOCK_EX else fcntl.LOCK_SH)
        fcntl.flock(run_file, mode)
        fcntl.flock(turn_file, fcntl.LOCK_UN)

    def _release(self) -> None:
        if self._files is not None:
            fcntl.flock(self._files[1], fcntl.LOCK_UN)
        self._shared = False
