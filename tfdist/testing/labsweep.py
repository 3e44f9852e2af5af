"""Finding and removing lab resources, also those of labs whose owner process died.

Every lab resource carries its lab's id (``tfl<owner pid>n<serial>``, see :mod:`tfdist.testing.labspec`),
so a scan of the machine's namespaces, links, cgroups (cpu and memory), /etc/netns, lab directories
and processes finds them all and tells whose they are: :func:`leftovers` lists them, :func:`sweep`
removes those whose owner is gone, :func:`destroy` removes one lab (what :meth:`Lab.close
<tfdist.testing.netlab.Lab.close>` calls).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from tfdist.errors import with_fix
from tfdist.testing import labspec
from tfdist.testing.cgroups import CGROUP_ROOT, lab_trees
from tfdist.testing.labspec import LAB_ROOT, LabError

ETC_NETNS = Path("/etc/netns")
NETNS_DIR = Path("/run/netns")
#: Searched after PATH for the system tools (root's PATH may lack the sbin directories).
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin")
_log = logging.getLogger(__name__)


def leftovers(*, root: Path = LAB_ROOT, cgroup_root: Path = CGROUP_ROOT) -> list[str]:
    """Every lab resource whose owner process is gone or is this process: empty when nothing is left.

    Labs of other live processes (a parallel test run) are not listed; this process's own labs are,
    open or not, so call it after closing them. Each entry says what and where, e.g.
    ``"netns tfl4242n1-h0"``, ``"process 5150 (sshd) of tfl4242n1"``.
    """
    found = []
    for lab_id, items in sorted(scan(root, cgroup_root).items()):
        if owner_pid(lab_id) == os.getpid() or not owner_alive(lab_id, root):
            found += items
    return found


def sweep(*, root: Path = LAB_ROOT, cgroup_root: Path = CGROUP_ROOT) -> list[str]:
    """Remove every lab whose owner process is dead; returns the ids removed. Each new Lab calls it."""
    removed = []
    for lab_id in sorted(scan(root, cgroup_root)):
        if not owner_alive(lab_id, root):
            try:
                destroy(lab_id, root, cgroup_root)
            except LabError as exc:  # a stale lab that resists must not stop a new one
                _log.warning("could not remove stale lab %s: %s", lab_id, exc)
                continue
            removed.append(lab_id)
    return removed


def scan(root: Path, cgroup_root: Path) -> dict[str, list[str]]:
    """``{lab_id: [description, ...]}`` of every lab resource on this machine."""
    found: dict[str, list[str]] = {}

    def add(name: str, text: str) -> None:
        lab_id = labspec.lab_id_of(name)
        if lab_id is not None:
            found.setdefault(lab_id, []).append(text)

    for namespace in netns_names():
        add(namespace, f"netns {namespace}")
    for link in link_names():
        add(link, f"link {link}")
    for base in dict.fromkeys(tree.base for tree in lab_trees(cgroup_root)):  # cpu, memory (one tree in v2)
        if base.is_dir():
            for path in base.iterdir():
                if path.is_dir():
                    add(path.name, f"cgroup {path}")
    for base in (ETC_NETNS, root):
        if base.is_dir():
            for path in base.iterdir():
                add(path.name, f"{'etc' if base == ETC_NETNS else 'dir'} {path}")
    seen = set()
    for pid, lab_id, what in lab_processes(root):
        seen.add(pid)
        found.setdefault(lab_id, []).append(f"process {pid} ({what}) of {lab_id}")
    for namespace in netns_names():
        if labspec.lab_id_of(namespace) is not None:
            for pid in set(netns_pids(namespace)) - seen:
                add(namespace, f"process {pid} ({program_name(pid)}) on {namespace}")
    return found


def destroy(lab_id: str, root: Path, cgroup_root: Path) -> None:
    """Kill every process of lab ``lab_id`` and remove all its resources; tolerates missing pieces."""
    namespaces = [name for name in netns_names() if labspec.lab_id_of(name) == lab_id]
    groups = [(tree, path.name) for tree in lab_trees(cgroup_root) if tree.base.is_dir()
              for path in tree.base.iterdir() if path.is_dir() and labspec.lab_id_of(path.name) == lab_id]

    def members() -> set[int]:
        pids = {pid for name in namespaces for pid in netns_pids(name)}
        pids |= {pid for tree, name in groups for pid in tree.members(name)}
        pids |= {pid for pid, owner, _ in lab_processes(root) if owner == lab_id}
        pids.discard(os.getpid())
        return pids

    deadline = time.monotonic() + 15
    while (pids := members()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    for name in namespaces:
        subprocess.run([executable("ip"), "netns", "del", name], capture_output=True, check=False)
    failures = []
    for tree, name in groups:
        try:
            tree.remove(name)
        except LabError as exc:  # remove the rest all the same, then report
            failures.append(exc)
    links = [link for link in link_names() if labspec.lab_id_of(link) == lab_id]
    for link in sorted(links, key=lambda name: name.endswith("b")):  # veths, then the bridge
        subprocess.run([executable("ip"), "link", "del", link], capture_output=True, check=False)
    for base in (ETC_NETNS, root):
        if base.is_dir():
            for path in base.iterdir():
                if labspec.lab_id_of(path.name) == lab_id:
                    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        ETC_NETNS.rmdir()  # only when empty: /etc/netns did not exist before the first lab
    deadline = time.monotonic() + 10  # namespaces die asynchronously; their veths go with them
    while any(labspec.lab_id_of(link) == lab_id for link in link_names()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if failures:
        raise failures[0]


def owner_pid(lab_id: str) -> int:
    owner = labspec.owner_of(lab_id)
    assert owner is not None, lab_id
    return owner


def owner_alive(lab_id: str, root: Path) -> bool:
    """Whether the process that built ``lab_id`` still runs (a reused pid has another start time)."""
    pid = owner_pid(lab_id)
    started = start_time(pid)
    if started is None:
        return False
    try:
        recorded = (root / lab_id / "owner").read_text().split()
    except OSError:
        return True  # being built or being removed: trust the pid
    return len(recorded) < 2 or recorded[1] == str(started)


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` (clock ticks since boot), or None when it is gone or a zombie.

    A killed owner whose parent never reaps it (an orphan under an init that does not) stays a zombie:
    dead all the same, so its labs are swept.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def lab_processes(root: Path) -> list[tuple[int, str, str]]:
    """``(pid, lab_id, name)`` of processes whose command line names a lab dir (sshds, sessions)."""
    marker = f"{root}/".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        index = cmdline.find(marker)
        if index < 0:
            continue
        lab_id = labspec.lab_id_of(cmdline[index + len(marker):].split(b"/", 1)[0].decode(errors="replace"))
        if lab_id is not None:
            found.append((int(entry.name), lab_id, program_name(int(entry.name), cmdline)))
    return found


def program_name(pid: int, cmdline: bytes | None = None) -> str:
    """The program name of ``pid`` (``sshd``, ``python``), for messages."""
    if cmdline is None:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return "?"
    first = cmdline.split(b"\0", 1)[0].decode(errors="replace").split() or ["?"]
    return Path(first[0]).name.rstrip(":")  # sshd rewrites its title to "sshd: /usr/sbin/sshd ..."


def netns_names() -> list[str]:
    try:
        return sorted(path.name for path in NETNS_DIR.iterdir())
    except OSError:
        return []


def link_names() -> list[str]:
    try:
        return sorted(path.name for path in Path("/sys/class/net").iterdir())
    except OSError:
        return []


def netns_pids(namespace: str) -> list[int]:
    result = subprocess.run([executable("ip"), "netns", "pids", namespace], capture_output=True, text=True,
                            check=False)
    return sorted(int(pid) for pid in result.stdout.split() if pid.isdigit())


def _which(tool: str) -> str | None:
    return shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), *SYSTEM_DIRS]))


def executable(tool: str) -> str:
    """``tool``'s absolute path (sbin directories searched even when PATH lacks them), else its name."""
    return _which(tool) or tool


def require_tools(tools: Mapping[str, str], setup: str, error: type[LabError] = LabError) -> dict[str, str]:
    """``{tool: absolute path}`` of ``tools`` (tool -> its Debian package, for the message); ``error``
    naming the first missing one, its package and ``setup`` (the fix)."""
    found = {}
    for tool, package in tools.items():
        path = _which(tool)
        if path is None:
            raise error(with_fix(f"`{tool}` (Debian package {package}) is not installed", setup))
        found[tool] = path
    return found
