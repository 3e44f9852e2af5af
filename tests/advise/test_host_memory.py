"""The hosts' memory as ``--probe`` reads it (tfdist/probe/host_memory.py), on fake /proc and cgroup trees:
cgroup v1 ``memory.limit_in_bytes``, v2 ``memory.max``, the smallest limit along the ancestors, and
/proc/meminfo when no limit is set."""
from __future__ import annotations

from pathlib import Path

from tfdist.probe.host_memory import HostMemory, cgroup_limit, meminfo, read_host_memory

MEMINFO = "MemTotal:       24683584 kB\nMemFree:        17716000 kB\nMemAvailable:   21452000 kB\n"


def _tree(root: Path, cgroup: str, files: dict[str, str]) -> Path:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/meminfo").write_text(MEMINFO)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_cgroup_v1_limit_of_the_group(tmp_path):
    root = _tree(tmp_path, "5:cpu,cpuacct:/lab\n4:memory:/lab/h2\n0::/\n", {
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
        "sys/fs/cgroup/memory/lab/memory.limit_in_bytes": "9223372036854771712\n",
        "sys/fs/cgroup/memory/lab/h2/memory.limit_in_bytes": "2147483648\n"})
    assert cgroup_limit(root) == (2 * 2**30, "/sys/fs/cgroup/memory/lab/h2/memory.limit_in_bytes")
    found = read_host_memory(root)
    assert (found.total, found.available, found.limit) == (24683584 * 1024, 21452000 * 1024, 2**31)
    assert found.usable == 2**31


def test_cgroup_v2_max_and_a_parents_smaller_limit(tmp_path):
    root = _tree(tmp_path, "0::/lab/h1\n", {
        "sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
        "sys/fs/cgroup/lab/memory.max": "1073741824\n",
        "sys/fs/cgroup/lab/h1/memory.max": "max\n"})
    assert cgroup_limit(root) == (2**30, "/sys/fs/cgroup/lab/memory.max")


def test_without_a_limit_memavailable_is_usable(tmp_path):
    root = _tree(tmp_path, "0::/user.slice\n", {"sys/fs/cgroup/user.slice/memory.max": "max\n"})
    found = read_host_memory(root)
    assert found.limit is None and found.usable == 21452000 * 1024
    assert found.as_dict()["usable"] == found.usable


def test_a_namespaced_group_reads_the_mounts_root(tmp_path):
    """In a cgroup namespace /proc/self/cgroup names a path the mount does not show: its root is ours."""
    root = _tree(tmp_path, "4:memory:/docker/abc\n", {
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n"})
    assert cgroup_limit(root)[0] == 512 * 2**20


def test_nothing_readable_is_none_not_an_error(tmp_path):
    assert cgroup_limit(tmp_path) == (None, None) and meminfo(tmp_path) == (None, None)
    assert read_host_memory(tmp_path).usable is None
    assert HostMemory.from_dict({"total": "x", "limit": True}) == HostMemory(None, None, None, None)
    assert HostMemory.from_dict(None) is None
