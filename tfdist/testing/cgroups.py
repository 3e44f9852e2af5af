"""CPU quotas and memory limits for lab hosts, under cgroup v1 or v2.

:class:`CpuCgroups` (v1 ``cpu.cfs_quota_us``, v2 ``cpu.max``) and :class:`MemoryCgroups` (v1
``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``, v2 ``memory.max`` and
``memory.swap.max``) detect which version the machine has from a cgroup root directory (a fake one
in the unit tests) and know the few files a limit needs::

    cgroups = CpuCgroups.detect()                 # /sys/fs/cgroup
    group = cgroups.create("tfl4242n1-h2")        # a directory; write pids to cgroups.procs(name)
    cgroups.set_quota("tfl4242n1-h2", cores=0.25) # a quarter of one core for everything in it
    cgroups.remove("tfl4242n1-h2")                # once its processes are gone

    memory = MemoryCgroups.detect()
    memory.create("tfl4242n1-h2")
    memory.set_limit("tfl4242n1-h2", 512 << 20)   # 512 MiB, swap included: beyond it the OOM killer

v1 is preferred when its controller is mounted (hybrid machines also mount an empty v2 tree).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tfdist.errors import with_fix
from tfdist.testing.labspec import LabError

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
_V1_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
MIN_MEMORY_BYTES = 16 << 20  # below this not even a shell starts: a typo (MB for bytes), refused


@dataclass(frozen=True)
class _Cgroups:
    """One controller's tree: ``version`` 1 or 2, ``base`` the directory lab cgroups go in."""

    version: int
    base: Path
    controller: ClassVar[str] = ""

    def path(self, name: str) -> Path:
        return self.base / name

    def procs(self, name: str) -> Path:
        """The file a process writes its pid to in order to join group ``name``."""
        return self.path(name) / "cgroup.procs"

    def create(self, name: str) -> Path:
        """Make group ``name`` (no limit yet); under v2 the parent must delegate the controller."""
        if self.version == 2:
            control = self.base / "cgroup.subtree_control"
            if control.is_file() and self.controller not in control.read_text().split():
                _write(control, f"+{self.controller}")
        path = self.path(name)
        path.mkdir(exist_ok=True)
        return path

    def members(self, name: str) -> list[int]:
        try:
            return [int(line) for line in self.procs(name).read_text().split()]
        except FileNotFoundError:
            return []

    def remove(self, name: str, timeout: float = 5.0) -> None:
        """Remove group ``name`` once it is empty (processes that were just killed may take a moment)."""
        path = self.path(name)
        deadline = time.monotonic() + timeout
        while True:
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    fix = f"kill the processes in {self.procs(name)}, then rmdir {path}"
                    raise LabError(with_fix(f"could not remove cgroup {path}: {exc.strerror}", fix)) from exc
                time.sleep(0.05)


@dataclass(frozen=True)
class CpuCgroups(_Cgroups):
    """The cpu controller's tree: ``version`` 1 or 2, ``base`` the directory lab cgroups go in."""

    controller: ClassVar[str] = "cpu"

    @classmethod
    def detect(cls, root: Path = CGROUP_ROOT) -> CpuCgroups | None:
        """The cpu controller under ``root``, or None when neither v1 nor v2 offers one."""
        for name in _V1_DIRS:
            if (root / name / "cpu.cfs_quota_us").is_file():
                return cls(1, root / name)
        controllers = root / "cgroup.controllers"
        if controllers.is_file() and "cpu" in controllers.read_text().split():
            return cls(2, root)
        return None

    def quota_files(self, cores: float | None, period_us: int = PERIOD_US) -> dict[str, str]:
        """``{file: text}`` that sets a quota of ``cores`` CPUs (None: no limit)."""
        if cores is not None and not cores > 0:
            raise LabError(with_fix(f"`cores` must be > 0 or None, got {cores!r}",
                                    "pass e.g. cores=0.25 (a quarter of a core), or None to lift the limit"))
        quota = None if cores is None else max(1000, round(cores * period_us))
        if self.version == 1:
            return {"cpu.cfs_period_us": str(period_us),
                    "cpu.cfs_quota_us": str(-1 if quota is None else quota)}
        return {"cpu.max": f"{'max' if quota is None else quota} {period_us}"}

    def set_quota(self, name: str, cores: float | None) -> None:
        for file, text in self.quota_files(cores).items():  # v1: the period first, then the quota
            _write(self.path(name) / file, text)


@dataclass(frozen=True)
class MemoryCgroups(_Cgroups):
    """The memory controller's tree: ``version`` 1 or 2, ``base`` the directory lab cgroups go in."""

    controller: ClassVar[str] = "memory"

    @classmethod
    def detect(cls, root: Path = CGROUP_ROOT) -> MemoryCgroups | None:
        """The memory controller under ``root``, or None when neither v1 nor v2 offers one."""
        if (root / "memory" / "memory.limit_in_bytes").is_file():
            return cls(1, root / "memory")
        controllers = root / "cgroup.controllers"
        if controllers.is_file() and "memory" in controllers.read_text().split():
            return cls(2, root)
        return None

    def limit_files(self, limit: int | None, swap: bool = True) -> list[tuple[str, str]]:
        """``[(file, text), ...]``, written in this order, that cap the group at ``limit`` bytes with
        no swap beyond it (None: no limit). ``swap``: the swap file exists (v1 ``memsw`` needs swap
        accounting, v2 ``memory.swap.max`` a kernel with swap support).

        v1 refuses a ``memsw`` limit below ``limit_in_bytes``, so ``memsw`` is first lifted, then
        both are set: valid whatever the current values."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < MIN_MEMORY_BYTES):
            raise LabError(with_fix(f"the memory limit must be a whole number of bytes >= {MIN_MEMORY_BYTES} "
                                    f"(16 MiB) or None, got {limit!r}",
                                    "pass e.g. 1536 << 20 (1.5 GiB), or None to lift the limit"))
        if self.version == 1:
            value = "-1" if limit is None else str(limit)
            files = [("memory.memsw.limit_in_bytes", "-1")] if swap else []
            files.append(("memory.limit_in_bytes", value))
            return files + ([("memory.memsw.limit_in_bytes", value)] if swap else [])
        files = [("memory.max", "max" if limit is None else str(limit))]
        return files + ([("memory.swap.max", "max" if limit is None else "0")] if swap else [])

    def set_limit(self, name: str, limit: int | None) -> None:
        """Cap everything in group ``name`` at ``limit`` bytes, swap included (None: no limit)."""
        swap_file = "memory.memsw.limit_in_bytes" if self.version == 1 else "memory.swap.max"
        for file, text in self.limit_files(limit, swap=(self.path(name) / swap_file).exists()):
            _write(self.path(name) / file, text)


def _write(path: Path, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # as a shell's `>`; the kernel ignores the truncation
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise LabError(with_fix(f"could not write {text!r} to {path}: {exc.strerror}",
                                "run as root on a machine whose cgroup cpu and memory controllers are writable")) from exc


def lab_trees(root: Path = CGROUP_ROOT) -> list[CpuCgroups | MemoryCgroups]:
    """The controllers a lab puts its hosts in (cpu, memory): those this machine has under ``root``."""
    return [tree for tree in (CpuCgroups.detect(root), MemoryCgroups.detect(root)) if tree is not None]
