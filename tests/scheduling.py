"""How the suite shares two cores: `make test` runs it under pytest-xdist (``-n 2``).

* **Units.** Every test file is one unit of work, run whole on one worker, so its module- and
  session-scoped fixtures (a shared Horovod job, a shared cluster) run once; files that read the same
  session fixture's jobs are one unit (``SHARED_UNITS``). All multi-host tests are
  one unit, ``lab``: they run one after another on one worker, in their order, the leftover check
  (``tests/multihost/test_zz_nothing_left.py``) last. The lab unit is collected first (it is the
  longest), then the files with the most ``slow`` tests, so the long units start early; `make test`
  passes ``--no-loadscope-reorder`` so xdist keeps that order.
* **No test runs alone.** The suite asserts no speed: the lab tests' bounds (a probe's link rates and
  core speeds, fault reactions) hold with a second test beside them, and speed is measured by the
  benchmarks run alone (`make bench`, `make bench-network`), not here.

Without xdist (``pytest`` alone, `make test-fast`) only the collection order above applies.

* **Where the time went.** At the end, `make test` prints each worker's busy time and the longest
  units (:class:`UnitClock`): the suite's wall time is the busier worker's, so that is where a cut pays.
"""
from __future__ import annotations

import pytest

LAB_UNIT = "lab"
LAB_PREFIX = "tests/multihost/"
# files whose tests read the jobs of another file's session fixture -> that file: one unit, one worker,
# so the jobs start once (tests/example_jobs.py: test_real_runs.py reads three of the examples' runs)
SHARED_UNITS = {"tests/report/test_real_runs.py": "tests/examples/test_examples.py"}


def unit_of(nodeid: str) -> str:
    """The unit of work of a test id: ``lab`` for the multi-host tests, else its file (or the file it
    shares jobs with, ``SHARED_UNITS``)."""
    path = nodeid.split("::", 1)[0]
    return LAB_UNIT if path.startswith(LAB_PREFIX) else SHARED_UNITS.get(path, path)


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


class UnitClock:
    """Seconds per unit of work and per worker, from the test reports the xdist controller receives."""

    def __init__(self) -> None:
        self.units: dict[str, float] = {}
        self.worker_of: dict[str, str] = {}
        self.workers: dict[str, float] = {}

    def add(self, nodeid: str, worker: str, seconds: float) -> None:
        unit = unit_of(nodeid)
        self.units[unit] = self.units.get(unit, 0.0) + seconds
        self.worker_of[unit] = worker
        self.workers[worker] = self.workers.get(worker, 0.0) + seconds

    def lines(self, top: int = 8) -> list[str]:
        """Each worker's busy time, then the ``top`` longest units with their worker."""
        if not self.workers:
            return []
        busy = ", ".join(f"{worker} {seconds / 60:.1f} min" for worker, seconds in sorted(self.workers.items()))
        longest = sorted(self.units.items(), key=lambda item: -item[1])[:top]
        return [f"busy: {busy}",
                *(f"{seconds:7.1f} s  {self.worker_of[unit]}  {unit}" for unit, seconds in longest)]
