"""Did a task run out of memory: the memory cgroup's OOM-kill counter on fake v1 and v2 trees, the
cause a SIGKILL gets, the one line and the supervisor's marker. No processes, no TensorFlow."""
from __future__ import annotations

from pathlib import Path

import pytest

from tfdist import cgroup_memory
from tfdist.cgroup_memory import MemoryRecord
from tfdist.launch import oom
from tfdist.launch.oom import KillCause

UNLIMITED_V1 = "9223372036854771712\n"


def fake_v1(root: Path, path: str, kills: int, limit: str = UNLIMITED_V1, failcnt: int = 0,
            oom_kill_line: bool = True) -> Path:
    """A v1 memory cgroup ``path`` under ``root/memory`` with its oom_control, limit and failcnt."""
    group = root / "memory" / path.strip("/")
    for directory in (root / "memory", group):
        directory.mkdir(parents=True, exist_ok=True)
        control = "oom_kill_disable 0\nunder_oom 0\n" + (f"oom_kill {kills if directory == group else 0}\n"
                                                          if oom_kill_line else "")
        (directory / "memory.oom_control").write_text(control)
        (directory / "memory.limit_in_bytes").write_text(limit if directory == group else UNLIMITED_V1)
        (directory / "memory.failcnt").write_text(f"{failcnt if directory == group else 0}\n")
    return group


def fake_v2(root: Path, path: str, kills: int, limit: str = "max\n") -> Path:
    group = root / path.strip("/")
    group.mkdir(parents=True, exist_ok=True)
    (group / "memory.events").write_text(f"low 0\nhigh 0\nmax 12\noom 2\noom_kill {kills}\noom_group_kill 0\n")
    (group / "memory.max").write_text(limit)
    return group


def test_the_memory_controller_is_found_in_proc_cgroup_for_v1_and_v2():
    v1 = "9:name=systemd:/\n4:memory:/tfl1n1-h3\n1:cpu,cpuacct:/\n0::/\n"
    assert cgroup_memory.memory_cgroup(v1) == (1, "/tfl1n1-h3")
    assert cgroup_memory.memory_cgroup("7:cpuset,memory:/a/b\n") == (1, "/a/b")
    assert cgroup_memory.memory_cgroup("0::/user.slice/x.scope\n") == (2, "/user.slice/x.scope")
    assert cgroup_memory.memory_cgroup("3:cpu:/\n") is None and cgroup_memory.memory_cgroup("") is None


def test_v1_reads_the_oom_kill_counter_and_the_limit(tmp_path):
    fake_v1(tmp_path, "/tfl1n1-h3", kills=2, limit="1610612736\n")
    assert cgroup_memory.read_record(1, "/tfl1n1-h3", tmp_path) == MemoryRecord("/tfl1n1-h3", 2, 1610612736, 0)
    fake_v1(tmp_path, "/free", kills=0)
    assert cgroup_memory.read_record(1, "/free", tmp_path).limit is None  # v1's "no limit" is a huge number
    assert cgroup_memory.read_record(1, "/tfl1n1-h3", tmp_path / "elsewhere") is None  # no hierarchy there


def test_a_group_the_mount_does_not_show_reads_the_mounts_root(tmp_path):
    """In a cgroup namespace /proc/PID/cgroup names a path the mount does not show: its root is ours."""
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("268435456\n")
    record = cgroup_memory.read_record(1, "/docker/abc", tmp_path)
    assert (record.cgroup, record.kills, record.limit) == ("/docker/abc", 4, 256 << 20)


def test_v2_reads_memory_events_and_memory_max_up_the_tree(tmp_path):
    fake_v2(tmp_path, "/lab", kills=0, limit="1073741824\n")
    fake_v2(tmp_path, "/lab/h3", kills=1)  # the limit is on the parent: the tightest one counts
    record = cgroup_memory.read_record(2, "/lab/h3", tmp_path)
    assert (record.kills, record.limit) == (1, 1073741824)


def test_snapshot_reads_the_cgroup_of_a_process_from_proc(tmp_path):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("4:memory:/tfl1n1-h3\n0::/\n")
    fake_v1(root, "/tfl1n1-h3", kills=3, limit="536870912\n")
    assert cgroup_memory.snapshot(42, root=root, proc=proc) == MemoryRecord("/tfl1n1-h3", 3, 536870912, 0)
    assert cgroup_memory.snapshot(43, root=root, proc=proc) is None  # no such process


@pytest.mark.parametrize(("before", "after", "expected"), [
    (MemoryRecord("/g", 0, 1 << 30), MemoryRecord("/g", 1, 1 << 30), KillCause(True, "h3", 1 << 30)),
    (MemoryRecord("/g", 1, None), MemoryRecord("/g", 1, None), KillCause(False, "h3", None)),
    (None, MemoryRecord("/g", 1, None), KillCause(None, "h3")),  # unreadable before: unknown
    (MemoryRecord("/g", 0, None), MemoryRecord("/other", 1, None), KillCause(None, "h3")),
    # a kernel without oom_kill: the limit being hit (failcnt) is the evidence
    (MemoryRecord("/g", None, 1 << 30, 0), MemoryRecord("/g", None, 1 << 30, 5), KillCause(True, "h3", 1 << 30)),
    (MemoryRecord("/g", None, None, None), MemoryRecord("/g", None, None, None), KillCause(None, "h3", None)),
])
def test_the_cause_of_a_sigkill_is_the_counter_rising_while_the_task_ran(before, after, expected):
    assert oom.kill_cause(before, after, host="h3") == expected


def test_an_oom_killed_ps_gets_one_line_with_task_host_limit_and_the_fix():
    cause = KillCause(True, "h3", 1536 << 20)
    assert cause.describe("ps:0") == ("ps:0 on h3 ran out of memory: the kernel's OOM killer killed it "
                                      "(SIGKILL) at its memory limit of 1.50 GiB (1610612736 bytes)")
    fix = cause.fix("ps:0")
    assert "raise --ps" in fix and "shards=N" in fix and "make_strategy('parameter_server', ...)" in fix
    assert "`tfdist advise --ps-memory 1610612736 --optimizer NAME`" in fix
    assert "--ps-memory BYTES" in KillCause(True, "h3", None).fix("ps:0")
    assert "lower the batch size" in KillCause(True, None).fix("worker:0")
    assert KillCause(True, None).describe("worker:0").startswith("worker:0 on this machine ran out of memory")


def test_an_unexplained_sigkill_names_the_usual_cause_and_dmesg():
    assert KillCause(None, "h3").describe("ps:0") == (
        "ps:0 killed by SIGKILL (the kernel's OOM killer is the usual cause: check `dmesg` on h3)")
    assert KillCause(None, "h3").fix("ps:0") is None
    assert "on this machine" in KillCause(None).describe("ps:0")


def test_the_supervisors_marker_survives_the_trip_and_anything_else_is_not_one():
    line = oom.encode_exit(9, KillCause(True, None, 123 << 20))
    assert line.startswith(oom.EXIT_MARKER) and "\n" not in line
    assert oom.decode_exit(line, "h3") == (9, KillCause(True, "h3", 123 << 20))
    assert oom.decode_exit(oom.encode_exit(15, KillCause(False)), "h1") == (15, KillCause(False, "h1"))
    for other in ("", "tfdist-task-exit", "tfdist-task-exit {", 'tfdist-task-exit {"oom": true}',
                  'tfdist-task-exit {"signal": 9, "oom": "yes"}', "[ps:0] tfdist-task-exit {}"):
        assert oom.decode_exit(other, "h3") is None


def test_sizes_read_as_people_and_advise_want_them():
    assert oom.format_bytes(768 << 20) == "768 MiB (805306368 bytes)"
    assert oom.format_bytes(3 << 30) == "3.00 GiB (3221225472 bytes)"
    assert oom.format_bytes(None) == "no limit"


def test_the_kill_counter_is_the_leafs_own_and_the_limit_the_tightest_along_the_ancestors(tmp_path):
    """A kill in a sibling group raises the parent's counter, never this group's: only the leaf's
    counter counts (v2: memory.events.local when the kernel has it), the limit may come from above."""
    fake_v2(tmp_path / "v2", "/user.slice", kills=5, limit="1073741824\n")  # a sibling scope's kills
    fake_v2(tmp_path / "v2", "/user.slice/session-1.scope", kills=0)
    record = cgroup_memory.read_record(2, "/user.slice/session-1.scope", tmp_path / "v2")
    assert (record.kills, record.limit) == (0, 1073741824)
    leaf = fake_v2(tmp_path / "v2", "/user.slice/session-2.scope", kills=3)  # 3 counted below it, 1 in it
    (leaf / "memory.events.local").write_text("low 0\nhigh 0\nmax 1\noom 1\noom_kill 1\noom_group_kill 0\n")
    assert cgroup_memory.read_record(2, "/user.slice/session-2.scope", tmp_path / "v2").kills == 1
    fake_v1(tmp_path / "v1", "/lab", kills=0, limit="536870912\n")
    (tmp_path / "v1" / "memory" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n")
    record = cgroup_memory.read_record(1, "/lab", tmp_path / "v1")
    assert (record.kills, record.limit) == (0, 536870912)


def test_a_wrapper_shell_that_exited_137_is_not_said_to_be_killed_itself():
    """`tfdist launch -- bash run.sh`: bash exits 137 when the OOM killer ends its python."""
    cause = KillCause(True, "h3", 768 << 20, exited=True)
    line = cause.describe("ps:0")
    assert line == ("ps:0 on h3 ran out of memory: the kernel's OOM killer killed a process it started (SIGKILL) "
                    "at its memory limit of 768 MiB (805306368 bytes), so it exited with code 137")
    assert "killed it" not in line and "raise --ps" in cause.fix("ps:0")
    assert KillCause(None, "h3", exited=True).describe("ps:0") == (
        "ps:0 exited with code 137, the code of a command whose process was killed by SIGKILL (the kernel's "
        "OOM killer is the usual cause: check `dmesg` on h3)")
    marker = oom.encode_exit(9, cause)
    assert oom.decode_exit(marker, "h3") == (9, cause)
    assert oom.decode_exit(oom.encode_exit(9, KillCause(True, None)), "h3") == (9, KillCause(True, "h3"))
    assert oom.decode_exit(marker.replace('"exited":true', '"exited":1'), "h3") is None
