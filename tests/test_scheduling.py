"""tests/scheduling.py: the units of work and their order."""
from __future__ import annotations

import re

import scheduling
from support import REPO


def test_the_multihost_tests_are_one_unit_and_every_other_file_its_own():
    assert scheduling.unit_of("tests/multihost/test_lab.py::test_x[a]") == "lab"
    assert scheduling.unit_of("tests/multihost/test_zz_nothing_left.py::test_y") == "lab"
    assert scheduling.unit_of("tests/strategies/test_horovod.py::test_z[k-k]") == "tests/strategies/test_horovod.py"
    assert scheduling.unit_of("tests/test_multihost_pure.py::test_w") == "tests/test_multihost_pure.py"


def test_every_file_that_reads_the_examples_shared_jobs_is_in_one_unit():
    """The session's ``shared_run`` starts each job once per worker: a file that asks for it in a unit of
    its own would start the jobs again on the other worker."""
    readers = sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                     if re.search(r"def test_\w+\([^)]*\bshared_run\b|def \w+\(shared_run\b",
                                  path.read_text()))
    assert "tests/examples/test_examples.py" in readers and "tests/report/test_real_runs.py" in readers
    assert {scheduling.unit_of(f"{path}::test_x") for path in readers} == {"tests/examples/test_examples.py"}


class _Item:
    def __init__(self, nodeid: str, slow: bool) -> None:
        self.nodeid, self._slow = nodeid, slow

    def get_closest_marker(self, name: str):
        return object() if name == "slow" and self._slow else None


def test_the_lab_comes_first_then_files_with_more_slow_tests_and_each_file_stays_together():
    items = [_Item("tests/a.py::t1", False), _Item("tests/b.py::t1", True), _Item("tests/b.py::t2", True),
             _Item("tests/multihost/test_lab.py::t", True), _Item("tests/c.py::t1", True),
             _Item("tests/multihost/test_zz_nothing_left.py::t", True)]
    scheduling.order_units(items)
    assert [item.nodeid for item in items] == [
        "tests/multihost/test_lab.py::t", "tests/multihost/test_zz_nothing_left.py::t",
        "tests/b.py::t1", "tests/b.py::t2", "tests/c.py::t1", "tests/a.py::t1"]


def test_the_unit_clock_adds_each_units_phases_and_each_workers_time():
    clock = scheduling.UnitClock()
    for nodeid, worker, seconds in [("tests/multihost/test_a.py::t", "gw0", 60.0),
                                    ("tests/multihost/test_b.py::t", "gw0", 30.0),
                                    ("tests/b.py::t1", "gw1", 20.0), ("tests/b.py::t1", "gw1", 1.0),
                                    ("tests/c.py::t", "gw1", 5.0)]:
        clock.add(nodeid, worker, seconds)
    assert clock.lines(top=2) == ["busy: gw0 1.5 min, gw1 0.4 min", "   90.0 s  gw0  lab", "   21.0 s  gw1  tests/b.py"]
    assert scheduling.UnitClock().lines() == []
