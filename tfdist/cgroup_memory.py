"""A process's memory cgroup, read from files: its tightest limit and its OOM-kill counter. Pure.

The one reader of memory cgroups in tfdist: ``tfdist advise --probe`` reports a host's limit
(:mod:`tfdist.probe.host_memory`), the launcher tells an OOM kill from a kill by hand
(:mod:`tfdist.launch.oom`). ``/proc/PID/cgroup`` names the group: cgroup v1's ``memory`` controller
(mounted at ``ROOT/memory``) first, as hybrid machines mount both, else v2's unified tree (``ROOT``).
The limit is read along the group and its ancestors (a parent's limit holds for its children, so
the tightest one applies); the OOM-kill counter of the group alone, since a parent's counter also
counts the kills in its other children (on v2 a kill in a sibling session scope):

=======  ==========================  ==========================================  ==================
version  limit (tightest of chain)   OOM kills (the group's own)                 limit was hit
=======  ==========================  ==========================================  ==================
1        ``memory.limit_in_bytes``   ``memory.oom_control`` ``oom_kill N``       ``memory.failcnt``
2        ``memory.max`` (``max``)    ``memory.events.local`` ``oom_kill N``      (none)
                                     (Linux 5.2+; else ``memory.events``)
=======  ==========================  ==========================================  ==================

``oom_kill`` in v1 needs Linux 4.13+; older kernels only have ``memory.failcnt``. When the group's
directory is not in the mount (a cgroup namespace shows its own group as the mount's root), the
mount's root is read::

    record = snapshot()          # MemoryRecord(cgroup='/tfl4242n1-h3', kills=0, limit=805306368, ...)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Limits at or above this are "no limit" (cgroup v1 writes a page-aligned LONG_MAX).
UNLIMITED = 1 << 62
_LIMIT_FILE = {1: "memory.limit_in_bytes", 2: "memory.max"}
#: Where the group's own OOM kills are counted, the first file that exists (v2's memory.events also
#: counts the kills in the group's descendants; memory.events.local, Linux 5.2+, does not).
_KILL_FILES = {1: ("memory.oom_control",), 2: ("memory.events.local", "memory.events")}


@dataclasses.dataclass(frozen=True)
class MemoryRecord:
    """One reading of a memory cgroup and its ancestors.

    cgroup: the group's path in the hierarchy (``/tfl4242n1-h3``); kills: OOM kills counted in the
    group itself (None: the kernel keeps no such counter); limit: the tightest limit in bytes (None:
    none); failcnt: v1 only, how often a limit was hit; limit_file: where ``limit`` was read.
    """

    cgroup: str
    kills: int | None
    limit: int | None
    failcnt: int | None = None
    limit_file: Path | None = dataclasses.field(default=None, compare=False)


def memory_cgroups(proc_cgroup: str) -> list[tuple[int, str]]:
    """``(version, path)`` of every memory hierarchy a ``/proc/PID/cgroup`` text names, v1 first.

    >>> memory_cgroups("4:memory:/tfl1n1-h3\\n0::/\\n")
    [(1, '/tfl1n1-h3'), (2, '/')]
    """
    v1, v2 = [], []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        number, controllers, path = parts
        path = path.strip() or "/"
        if "memory" in controllers.split(","):
            v1.append((1, path))
        elif number == "0" and controllers == "":
            v2.append((2, path))
    return v1 + v2


def memory_cgroup(proc_cgroup: str) -> tuple[int, str] | None:
    """The first of :func:`memory_cgroups` (the v1 memory controller if there is one), or None.

    >>> memory_cgroup("0::/user.slice/session-1.scope\\n")
    (2, '/user.slice/session-1.scope')
    """
    found = memory_cgroups(proc_cgroup)
    return found[0] if found else None


def _number(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _keyed(text: str | None, key: str) -> int | None:
    """The number after ``key`` in a ``key value`` file (memory.events, memory.oom_control)."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _number(value)
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _kills(group: Path, version: int) -> int | None:
    """The OOM kills counted in ``group`` itself (not its parents, whose counters include their
    other children's): the first of :data:`_KILL_FILES` that can be read; None when none has one."""
    for name in _KILL_FILES[version]:
        text = _read(group / name)
        if text is not None:
            return _keyed(text, "oom_kill")
    return None


def read_record(version: int, cgroup: str, root: Path = CGROUP_ROOT) -> MemoryRecord | None:
    """The record of ``cgroup`` (v1: under ``root/memory``, v2: under ``root``), or None when that
    hierarchy is not mounted there."""
    top = root / "memory" if version == 1 else root
    if not top.is_dir():
        return None
    leaf = top / PurePosixPath(cgroup).relative_to("/") if cgroup.startswith("/") else top / cgroup
    chain = [leaf, *[p for p in leaf.parents if p == top or top in p.parents]] if leaf.is_dir() else [top]
    limit_name = _LIMIT_FILE[version]
    kills = _kills(chain[0], version)
    failcnt = limit = None
    limit_file = None
    for directory in chain:
        hits = _number(_read(directory / "memory.failcnt")) if version == 1 else None
        if hits is not None:
            failcnt = (failcnt or 0) + hits
        cap = _number(_read(directory / limit_name))  # v2's "max" reads as None
        if cap is not None and 0 < cap < UNLIMITED and (limit is None or cap < limit):
            limit, limit_file = cap, directory / limit_name
    return MemoryRecord(cgroup, kills, limit, failcnt, limit_file)


def snapshot(pid: int | str = "self", root: Path = CGROUP_ROOT, proc: Path = Path("/proc")) -> MemoryRecord | None:
    """The memory record of process ``pid``'s cgroup: the first hierarchy mounted under ``root``
    that its ``/proc/PID/cgroup`` names; None when none can be read here."""
    text = _read(proc / str(pid) / "cgroup")
    for version, cgroup in memory_cgroups(text or ""):
        record = read_record(version, cgroup, root)
        if record is not None:
            return record
    return None
