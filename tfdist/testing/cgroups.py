"""CPU quotas for lab hosts under cgroup v1 (``cpu.cfs_quota_us``) or v2 (``cpu.max``).

:class:`CpuCgroups` detects which one the machine has from a cgroup root directory (a fake one in the
unit tests) and knows the few files a quota needs::

    cgroups = CpuCgroups.detect()                 # /sys/fs/cgroup
    group = cgroups.create("tfl4242n1-h2")        # a directory; write pids to cgroups.procs(name)
    cgroups.set_quota("tfl4242n1-h2", cores=0.25) # a quarter of one core for everything in it
    cgroups.remove("tfl4242n1-h2")                # once its processes are gone

v1 is preferred when its cpu controller is mounted (hybrid machines also mount an empty v2 tree).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tfdist.errors import with_fix
from tfdist.testing.labspec import LabError

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
_V1_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


@dataclass(frozen=True)
class CpuCgroups:
    """The cpu controller's tree: ``version`` 1 or 2, ``base`` the directory lab cgroups go in."""

    version: int
    base: Path

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

    def path(self, name: str) -> Path:
        return self.base / name

    def procs(self, name: str) -> Path:
        """The file a process writes its pid to in order to join group ``name``."""
        return self.path(name) / "cgroup.procs"

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

    def create(self, name: str) -> Path:
        """Make group ``name`` (no limit yet); under v2 the parent must delegate the cpu controller."""
        if self.version == 2:
            control = self.base / "cgroup.subtree_control"
            if control.is_file() and "cpu" not in control.read_text().split():
                _write(control, "+cpu")
        path = self.path(name)
        path.mkdir(exist_ok=True)
        return path

    def set_quota(self, name: str, cores: float | None) -> None:
        for file, text in self.quota_files(cores).items():  # v1: the period first, then the quota
            _write(self.path(name) / file, text)

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


def _write(path: Path, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise LabError(with_fix(f"could not write {text!r} to {path}: {exc.strerror}",
                                "run as root on a machine whose cgroup cpu controller is writable")) from exc
