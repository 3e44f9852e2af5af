"""Runs after every other multi-host test (the conftest puts it last): the machine is as clean as before.

No network namespace, bridge or veth of a lab, no sshd or other process on a lab host, no cgroup (cpu or
memory), no /etc/netns entry and no lab directory may remain from this run, or from any earlier one whose owner
died (labs of other live processes, such as a parallel run, are theirs to remove).
"""
from __future__ import annotations

import os
from pathlib import Path

from tfdist.testing import labspec
from tfdist.testing.netlab import leftovers


def test_no_lab_resource_is_left_on_the_machine():
    assert leftovers() == []


def test_nothing_named_after_this_run_is_left():
    """A second look that does not rely on leftovers(): no name, no command line of this run's labs."""
    mine = f"{labspec.PREFIX}{os.getpid()}n"
    places = [Path("/run/netns"), Path("/sys/class/net"), Path("/etc/netns"), labspec.LAB_ROOT,
              Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")]
    found = [str(place / name) for place in places if place.is_dir() for name in os.listdir(place)
             if name.startswith(mine)]
    marker = f"{labspec.LAB_ROOT}/{mine}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes():
                found.append(f"process {entry.name}: {(entry / 'cmdline').read_bytes()[:200]!r}")
        except OSError:
            continue
    assert found == []
