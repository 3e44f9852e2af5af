"""tests/scheduling.py: the units of work and the turn lock that lets an ``alone`` test run by itself."""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

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


def _unit(directory: str, tests: list[tuple[str | None, bool, float]], log: str, name: str,
          ready=None) -> None:
    """One worker: runs ``tests`` of the unit "u" one after the other, each (next unit, alone, seconds);
    sets ``ready`` just before asking for its first turn."""
    turns = scheduling.Turns(Path(directory))
    if ready is not None:
        ready.set()
    for index, (next_unit, alone, seconds) in enumerate(tests):
        with turns.hold("u", next_unit, alone):
            with open(log, "a") as out:
                out.write(f"start {name}{index} {time.monotonic()}\n")
            time.sleep(seconds)
            with open(log, "a") as out:
                out.write(f"end {name}{index} {time.monotonic()}\n")


def _spans(log: Path) -> dict[str, tuple[float, float]]:
    starts, ends = {}, {}
    for line in log.read_text().splitlines():
        kind, name, at = line.split()
        (starts if kind == "start" else ends)[name] = float(at)
    return {name: (starts[name], ends[name]) for name in starts}


def _start(context, *args):
    process = context.Process(target=_unit, args=args)
    process.start()
    return process


def test_an_alone_test_waits_for_the_running_unit_and_later_units_wait_for_it(tmp_path):
    """A unit of two tests runs; an alone test asks during its first test, then another unit asks:
    the alone test starts only after the whole first unit (its second test included), and the later
    unit only after the alone test ends (it does not overtake it)."""
    log, context = str(tmp_path / "log"), multiprocessing.get_context("fork")
    first_in, alone_asks = context.Event(), context.Event()
    first = _start(context, str(tmp_path), [("u", False, 0.6), (None, False, 0.6)], log, "first", first_in)
    assert first_in.wait(30)
    time.sleep(0.2)  # the first unit holds its turn now
    alone = _start(context, str(tmp_path), [(None, True, 0.4)], log, "alone", alone_asks)
    assert alone_asks.wait(30)
    time.sleep(0.3)  # the alone test is waiting for the run lock, its turn taken
    later = _start(context, str(tmp_path), [(None, False, 0.1)], log, "later")
    for process in (first, alone, later):
        process.join(30)
        assert process.exitcode == 0
    spans = _spans(tmp_path / "log")
    assert spans["alone0"][0] >= spans["first1"][1]  # after the first unit's LAST test
    assert spans["later0"][0] >= spans["alone0"][1]


def test_units_run_together(tmp_path):
    log, context = str(tmp_path / "log"), multiprocessing.get_context("fork")
    workers = [_start(context, str(tmp_path), [(None, False, 0.5)], log, f"s{n}") for n in (1, 2)]
    for process in workers:
        process.join(30)
        assert process.exitcode == 0
    spans = _spans(tmp_path / "log")
    assert spans["s20"][0] < spans["s10"][1] and spans["s10"][0] < spans["s20"][1]  # they overlapped


def test_outside_xdist_nothing_is_locked_and_the_controllers_directory_is_removed(tmp_path):
    class Config:
        stash = pytest.Stash()

    with scheduling.turns(Config()).hold("u", None, alone=True):  # no directory: returns at once
        pass
    made = Path(scheduling.lock_dir_for_workers(Config))
    assert made.is_dir() and scheduling.lock_dir_for_workers(Config) == str(made)  # made once
    scheduling.remove_lock_dir(Config)
    assert not made.exists()
