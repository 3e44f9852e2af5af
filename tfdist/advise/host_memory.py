"""How much memory a task on this host may use: its cgroup's limit, else what /proc/meminfo has free.

Pure reading of files under ``root`` (``/`` on a host, a fake tree in tests), so ``tfdist advise
--probe`` reports each host's memory without TensorFlow:

* the memory cgroup of this process, from ``/proc/self/cgroup``: cgroup v1's ``memory`` controller
  (``/sys/fs/cgroup/memory/<path>/memory.limit_in_bytes``) or v2's unified tree
  (``/sys/fs/cgroup/<path>/memory.max``; ``max`` is no limit). The smallest limit of the group and
  its ancestors applies (a parent's cap holds for every child); when the group's directory is not
  visible (a cgroup namespace shows its own group as the root), the mount's root is read;
* ``/proc/meminfo``: ``MemTotal`` and ``MemAvailable`` (what can be given to a new process without
  swapping, page cache included).

A task may use the smaller of the cgroup's limit and MemAvailable (:attr:`HostMemory.usable`).

    found = read_host_memory()            # HostMemory(total=..., available=..., limit=..., source=...)
    found.usable
"""
from __future__ import annotations

import dataclasses
from pathlib import Path, PurePosixPath
from typing import Any

#: Limits at or above this are "no limit" (cgroup v1 writes 9223372036854771712 for unlimited).
UNLIMITED = 2**62


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


def _read_number(path: Path) -> int | None:
    """A limit file's value; None for ``max``, unlimited, missing or unreadable."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    value = int(text)
    return value if 0 < value < UNLIMITED else None


def _groups(root: Path) -> list[tuple[Path, PurePosixPath, str]]:
    """``(mount, path inside it, limit file name)`` of this process's memory cgroup: v1 first."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    v1, v2 = [], []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        number, controllers, path = parts
        inside = PurePosixPath(path.strip() or "/")
        if "memory" in controllers.split(","):
            v1.append((root / "sys/fs/cgroup/memory", inside, "memory.limit_in_bytes"))
        elif number == "0" and controllers == "":
            v2.append((root / "sys/fs/cgroup", inside, "memory.max"))
    return v1 + v2


def cgroup_limit(root: Path | str = "/") -> tuple[int | None, str | None]:
    """``(limit bytes, file)`` of this process's memory cgroup (the smallest along its ancestors);
    ``(None, None)`` without a limit or a readable cgroup tree."""
    root = Path(root)
    for mount, inside, name in _groups(root):
        if not mount.is_dir():
            continue
        found: list[tuple[int, Path]] = []
        relative = inside.relative_to("/")
        visible = (mount / relative).is_dir()
        chain = [relative, *relative.parents] if visible else [PurePosixPath(".")]
        for part in chain:
            path = mount / part / name
            value = _read_number(path)
            if value is not None:
                found.append((value, path))
        if found:
            value, path = min(found)
            return value, "/" + str(path.relative_to(root))
        if (mount / name).exists() or visible:
            return None, None  # this controller is mounted and sets no limit
    return None, None


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
