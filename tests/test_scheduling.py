"""tests/scheduling.py: the units of work and the turn lock that lets an ``alone`` test run by itself."""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import scheduling


def test_the_multihost_tests_are_one_unit_and_every_other_file_its_own():
    assert scheduling.unit_of("tests/multihost/test_lab.py::test_x[a]") == "lab"
    assert scheduling.unit_of("tests/multihost/test_zz_nothing_left.py::test_y") == "lab"
    assert scheduling.unit_of("tests/strategies/test_horovod.py::test_z[k-k]") == "tests/strategies/test_horovod.py"
    assert scheduling.unit_of("tests/test_multihost_pure.py::test_w") == "tests/test_multihost_pure.py"


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


def _hold(directory: str, alone: bool, seconds: float, log: str, name: str, ready=None) -> None:
    with scheduling.turn(Path(directory), alone):
        if ready is not None:
            ready.set()
        with open(log, "a") as out:
            out.write(f"start {name} {time.monotonic()}\n")
        time.sleep(seconds)
        with open(log, "a") as out:
            out.write(f"end {name} {time.monotonic()}\n")


def _spans(log: Path) -> dict[str, tuple[float, float]]:
    starts, ends = {}, {}
    for line in log.read_text().splitlines():
        kind, name, at = line.split()
        (starts if kind == "start" else ends)[name] = float(at)
    return {name: (starts[name], ends[name]) for name in starts}


def test_an_alone_test_waits_for_the_running_one_and_later_tests_wait_for_it(tmp_path):
    """A shared holder runs; an alone one asks, then another shared one: the alone one starts after the
    first ends, and the second shared one only after the alone one ends (it does not overtake it)."""
    log = tmp_path / "log"
    context = multiprocessing.get_context("fork")
    first_in = context.Event()
    first = context.Process(target=_hold, args=(str(tmp_path), False, 1.0, str(log), "first", first_in))
    first.start()
    assert first_in.wait(30)
    alone = context.Process(target=_hold, args=(str(tmp_path), True, 0.5, str(log), "alone"))
    alone.start()
    time.sleep(0.3)  # the alone one is waiting now (the first holds the run lock for 1 s)
    later = context.Process(target=_hold, args=(str(tmp_path), False, 0.1, str(log), "later"))
    later.start()
    for process in (first, alone, later):
        process.join(30)
        assert process.exitcode == 0
    spans = _spans(log)
    assert spans["alone"][0] >= spans["first"][1]
    assert spans["later"][0] >= spans["alone"][1]


def test_shared_holders_run_together(tmp_path):
    log = tmp_path / "log"
    context = multiprocessing.get_context("fork")
    holders = [context.Process(target=_hold, args=(str(tmp_path), False, 0.5, str(log), f"s{n}")) for n in (1, 2)]
    for process in holders:
        process.start()
    for process in holders:
        process.join(30)
        assert process.exitcode == 0
    spans = _spans(log)
    assert spans["s2"][0] < spans["s1"][1] and spans["s1"][0] < spans["s2"][1]  # they overlapped


def test_without_xdist_there_is_no_lock_directory():
    class Config:
        pass

    assert scheduling.lock_dir(Config()) is None
