"""Tests across several hosts: every test here runs on the network lab (tfdist.testing.netlab).

* every test in this directory is marked ``multihost`` (and so ``slow``): `make test-fast` leaves them out;
* they need root (network namespaces, bridges, sshd): without it each fails with a message saying so;
* ``make_lab(hosts)`` builds a :class:`~tfdist.testing.netlab.Lab` that is closed after the test,
  whatever happens; SIGTERM during these tests unwinds like Ctrl-C, so labs are closed then too;
* ``test_zz_nothing_left.py`` runs last and checks the machine is as clean as before.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tfdist.testing.netlab import Lab

HERE = Path(__file__).resolve().parent
LAST = "test_zz_nothing_left.py"


def _here(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).resolve().parents


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if _here(item)]
    for item in mine:
        item.add_marker(pytest.mark.multihost)
        item.add_marker(pytest.mark.slow)
    last = [item for item in mine if Path(str(item.path)).name == LAST]
    if last:  # whatever order plugins chose, the leftover check comes after every other lab test
        items[:] = [item for item in items if item not in last] + last


@pytest.fixture(autouse=True)
def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("the multi-host tests need root to build the network lab (namespaces, bridges, sshd per "
                    "host); CI runs as root: run them as root or with sudo, or leave them out with "
                    "-m 'not slow'")


@pytest.fixture(scope="session", autouse=True)
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) raises KeyboardInterrupt, so fixtures close their labs."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def make_lab() -> Iterator[Callable[..., Lab]]:
    """``make_lab(["h0", "h1"], **kwargs)``: a Lab closed after the test, whatever happens."""
    labs: list[Lab] = []

    def make(hosts, **kwargs) -> Lab:
        lab = Lab(hosts, **kwargs)
        labs.append(lab)
        return lab

    try:
        yield make
    finally:
        for lab in labs:
            lab.close()
