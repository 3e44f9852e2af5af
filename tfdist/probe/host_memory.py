"""How much memory a task on this host may use: its cgroup's limit, else what /proc/meminfo has free.

Pure reading of files under ``root`` (``/`` on a host, a fake tree in tests), so ``tfdist advise
--probe`` reports each host's memory without TensorFlow:

* the memory cgroup of this process (:mod:`tfdist.cgroup_memory`, from ``/proc/self/cgroup``):
  cgroup v1's ``memory.limit_in_bytes`` or v2's ``memory.max``, the smallest along the group and its
  ancestors;
* ``/proc/meminfo``: ``MemTotal`` and ``MemAvailable`` (what can be given to a new process without
  swapping, page cache included).

A task may use the smaller of the cgroup's limit and MemAvailable (:attr:`HostMemory.usable`).

    found = read_host_memory()            # HostMemory(total=..., available=..., limit=..., source=...)
    found.usable
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tfdist.cgroup_memory import snapshot


@dataclasses.dataclass(frozen=True)
class HostMemory:
    """total / available: /proc/meminfo's MemTotal and MemAvailable (bytes; None if unreadable);
    limit: the memory cgroup's limit (None: none); source: the file the limit came from."""

    total: int | None
    available: int | None
    limit: int | None = None
    source: str | None = None

    @property
    def usable(self) -> int | None:
        """What one process may use: the smaller of the cgroup limit and MemAvailable (MemTotal when
        MemAvailable is missing); None when nothing could be read."""
        free = self.available if self.available is not None else self.total
        known = [value for value in (self.limit, free) if value is not None]
        return min(known) if known else None

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "available": self.available, "limit": self.limit,
                "source": self.source, "usable": self.usable}

    @classmethod
    def from_dict(cls, data: Any) -> HostMemory | None:
        """The agent's answer back (None when it sent none or garbage)."""
        if not isinstance(data, dict):
            return None
        values = {}
        for name in ("total", "available", "limit"):
            value = data.get(name)
            values[name] = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        source = data.get("source")
        return cls(values["total"], values["available"], values["limit"],
                   source if isinstance(source, str) else None)


def cgroup_limit(root: Path | str = "/") -> tuple[int | None, str | None]:
    """``(limit bytes, file)`` of this process's memory cgroup (the smallest along its ancestors);
    ``(None, None)`` without a limit or a readable cgroup tree."""
    root = Path(root)
    record = snapshot(root=root / "sys/fs/cgroup", proc=root / "proc")
    if record is None or record.limit is None or record.limit_file is None:
        return None, None
    return record.limit, "/" + str(record.limit_file.relative_to(root))


def meminfo(root: Path | str = "/") -> tuple[int | None, int | None]:
    """``(MemTotal, MemAvailable)`` in bytes from ``/proc/meminfo`` (None when missing)."""
    values: dict[str, int] = {}
    try:
        text = (Path(root) / "proc/meminfo").read_text()
    except OSError:
        return None, None
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if key in ("MemTotal", "MemAvailable") and words and words[0].isdigit():
            scale = 1024 if words[1:2] == ["kB"] else 1
            values[key] = int(words[0]) * scale
    return values.get("MemTotal"), values.get("MemAvailable")


def read_host_memory(root: Path | str = "/") -> HostMemory:
    """This host's memory as a task here sees it (module docstring); a tree it may not read (a
    permission error) counts as no limit, so reading memory never fails a link measurement."""
    try:
        total, available = meminfo(root)
        limit, source = cgroup_limit(root)
    except OSError:
        return HostMemory(None, None)
    return HostMemory(total, available, limit, source)
