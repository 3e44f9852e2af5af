"""The network lab's pure parts: names, subnets, file texts, cgroup v1/v2 detection, error messages.

No root, no namespaces: the lab itself is tested in tests/multihost/.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tfdist.errors import TfdistError
from tfdist.testing import labspec, labsweep, netlab
from tfdist.testing.cgroups import CpuCgroups, MemoryCgroups, lab_trees
from tfdist.testing.labspec import LabError, LabNames


def test_lab_error_is_a_tfdist_error():
    assert issubclass(LabError, TfdistError) and issubclass(LabError, RuntimeError)
    assert netlab.LabError is LabError


@pytest.mark.parametrize(("hosts", "message"), [
    ("h0", "list of host names, got the string 'h0'"),
    ([], "`hosts` is empty"),
    (["H0"], "'H0' is not a short name"),
    (["h-0"], "'h-0' is not a short name"),
    (["0h"], "'0h' is not a short name"),
    (["h0", "h1", "h0"], "h0 listed twice"),
    ([f"h{i}" for i in range(201)], "201 lab hosts do not fit one /24"),
])
def test_bad_host_lists_are_refused_with_the_fix(hosts, message):
    with pytest.raises(LabError, match="fix:") as caught:
        labspec.validate_hosts(hosts)
    assert message in str(caught.value)


def test_names_carry_the_owner_pid_and_a_serial():
    names = LabNames(owner=4242, serial=3, hosts=("h0", "ps", "worker1"))
    assert names.lab_id == "tfl4242n3"
    assert (names.bridge, names.namespace("ps"), names.veth("ps"), names.veth("worker1")) == (
        "tfl4242n3b", "tfl4242n3-ps", "tfl4242n3v1", "tfl4242n3v2")
    assert names.lab_dir(Path("/x")) == Path("/x/tfl4242n3")
    other = LabNames(owner=4242, serial=4, hosts=("h0",))
    assert {names.bridge, names.veth("h0")}.isdisjoint({other.bridge, other.veth("h0")})


def test_interface_names_fit_linux_limit_or_the_lab_refuses():
    names = LabNames(owner=4194304, serial=99, hosts=tuple(f"h{i}" for i in range(10)))
    assert max(len(names.bridge), len(names.veth("h9"))) <= labspec.IFNAMSIZ
    with pytest.raises(LabError, match="longer than Linux's 15 characters"):
        LabNames(owner=4194304, serial=999, hosts=tuple(f"h{i}" for i in range(11)))


@pytest.mark.parametrize(("name", "owner", "lab_id"), [
    ("tfl4242n1", 4242, "tfl4242n1"), ("tfl4242n1-h0", 4242, "tfl4242n1"),
    ("tfl4242n12b", 4242, "tfl4242n12"), ("tfl4242n1v3", 4242, "tfl4242n1"),
    ("tfl4242n1x", None, None), ("tflabc", None, None), ("eth0", None, None), ("tfd123br", None, None),
])
def test_owner_and_lab_id_are_read_back_from_names(name, owner, lab_id):
    assert labspec.owner_of(name) == owner and labspec.lab_id_of(name) == lab_id


def test_subnet_choice_skips_every_used_network():
    used = labspec.used_networks(
        "1: lo    inet 127.0.0.1/8 scope host lo\n"
        "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n"
        "2: eth0    inet6 fd00::2/64 scope global\n"
        "5: tfl1n1b    inet 198.18.5.1/24 scope global tfl1n1b\n"
        "6: tfl2n1b    inet 198.18.6.1/24 scope global tfl2n1b\n")
    assert ipaddress.ip_network("198.18.5.0/24") in used and ipaddress.ip_network("fd00::/64") in used
    candidates = list(labspec.LAB_RANGE.subnets(new_prefix=24))[1:]
    start = candidates.index(ipaddress.ip_network("198.18.5.0/24"))
    assert labspec.pick_subnet(used, seed=start) == ipaddress.ip_network("198.18.7.0/24")
    assert labspec.pick_subnet([], seed=0) == ipaddress.ip_network("198.18.1.0/24")  # never 198.18.0.0/24
    assert labspec.pick_subnet([], seed=len(candidates) - 1) == ipaddress.ip_network("198.19.255.0/24")
    wide = [ipaddress.ip_network("198.18.0.0/16")]  # a wide network on the machine covers many /24s
    assert labspec.pick_subnet(wide, seed=0) == ipaddress.ip_network("198.19.0.0/24")
    with pytest.raises(LabError, match="every /24 of 198.18.0.0/15 is already used.*fix:"):
        labspec.pick_subnet([labspec.LAB_RANGE], seed=0)


def test_addresses_of_bridge_and_hosts():
    subnet = ipaddress.ip_network("198.18.7.0/24")
    assert str(labspec.bridge_address(subnet)) == "198.18.7.1"
    assert labspec.host_addresses(subnet, ("h0", "h1")) == {"h0": "198.18.7.11", "h1": "198.18.7.12"}


def test_hosts_file_maps_every_host_and_localhost():
    text = labspec.hosts_file({"h0": "198.18.7.11", "h1": "198.18.7.12"})
    entries = [line.split() for line in text.splitlines()]
    assert ["127.0.0.1", "localhost"] in entries
    assert ["198.18.7.11", "h0"] in entries and ["198.18.7.12", "h1"] in entries


def test_sshd_listens_on_one_address_with_the_labs_key_only():
    lab_dir = Path("/run/tfdist-labs/tfl1n1")
    text = labspec.sshd_config("198.18.7.12", 2022, lab_dir, "h1")
    options = dict(line.split(" ", 1) for line in text.splitlines())
    assert options["ListenAddress"] == "198.18.7.12" and options["Port"] == "2022"
    assert options["HostKey"] == str(lab_dir / "hostkey")
    assert options["AuthorizedKeysFile"] == str(lab_dir / "authorized_keys")
    assert options["PasswordAuthentication"] == "no" and options["UsePAM"] == "no"
    assert "ClientAliveInterval" not in options and "ClientAliveCountMax" not in options  # like a stock sshd
    assert options["PidFile"].startswith(str(lab_dir))


def test_client_config_trusts_the_lab_but_leaves_port_and_key_to_the_user():
    text = labspec.ssh_config(Path("/run/tfdist-labs/tfl1n1"))
    assert "UserKnownHostsFile /run/tfdist-labs/tfl1n1/known_hosts" in text
    assert "StrictHostKeyChecking yes" in text and "BatchMode yes" in text
    assert "Port" not in text.replace("Host *", "") and "IdentityFile" not in text


def test_known_hosts_names_every_host_by_name_and_address():
    key = "ssh-ed25519 AAAAC3Nza tfdist-lab-tfl1n1\n"
    text = labspec.known_hosts({"h0": "198.18.7.11", "h1": "198.18.7.12"}, 2022, key)
    assert text.splitlines() == ["[h0]:2022,[198.18.7.11]:2022 ssh-ed25519 AAAAC3Nza",
                                 "[h1]:2022,[198.18.7.12]:2022 ssh-ed25519 AAAAC3Nza"]
    assert labspec.known_hosts({"h0": "198.18.7.11"}, 22, key) == "h0,198.18.7.11 ssh-ed25519 AAAAC3Nza\n"


def test_the_wrapper_joins_the_cgroup_before_entering_the_namespace():
    procs = Path("/sys/fs/cgroup/cpu/tfl1n1-h1/cgroup.procs")
    argv = labspec.wrap_argv("h1", "tfl1n1-h1", ["python", "-c", "print(1)"], procs,
                             {"ip": "/usr/sbin/ip", "sh": "/bin/sh"})
    assert argv[:5] == ["/bin/sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "tfdist-lab", str(procs)]
    rest = argv[5:]
    assert rest[:4] == ["/usr/sbin/ip", "netns", "exec", "tfl1n1-h1"]
    assert rest[4:7] == ["unshare", "--uts", "--"]
    assert rest[-5:] == ["hostname", "h1", "python", "-c", "print(1)"]
    assert labspec.wrap_argv("h1", "tfl1n1-h1", ["true"], None)[0] == "ip"  # no cgroup: straight in


def test_token_bucket_arguments():
    assert labspec.tbf_args(20)[:3] == ["tbf", "rate", "20mbit"]
    assert int(labspec.tbf_args(20)[4]) == 32 * 1024  # small rates: the minimum burst
    assert int(labspec.tbf_args(1000)[4]) == 1_250_000  # 10 ms at 1 Gbit/s
    with pytest.raises(LabError, match="`rate_mbit` must be > 0"):
        labspec.tbf_args(0)
    assert labspec.netem_args(None, 5)[:3] == ["netem", "delay", "5ms"]


# --- cgroups: v1 and v2 on fake roots ----------------------------------------------------------------
def fake_v1(root: Path) -> Path:
    base = root / "cpu"
    base.mkdir(parents=True)
    (base / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "unified").mkdir()  # hybrid machines also mount an empty v2 tree
    return base


def fake_v2(root: Path, controllers: str = "cpuset cpu io memory pids") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def test_detects_cgroup_v1(tmp_path):
    base = fake_v1(tmp_path)
    assert CpuCgroups.detect(tmp_path) == CpuCgroups(1, base)


def test_detects_v1_mounted_as_cpu_cpuacct(tmp_path):
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    assert CpuCgroups.detect(tmp_path) == CpuCgroups(1, tmp_path / "cpu,cpuacct")


def test_detects_cgroup_v2(tmp_path):
    fake_v2(tmp_path)
    assert CpuCgroups.detect(tmp_path) == CpuCgroups(2, tmp_path)


def test_no_cpu_controller_is_none(tmp_path):
    fake_v2(tmp_path, controllers="memory pids")
    assert CpuCgroups.detect(tmp_path) is None
    assert CpuCgroups.detect(tmp_path / "absent") is None


def test_quota_files_v1_and_v2():
    v1, v2 = CpuCgroups(1, Path("/x")), CpuCgroups(2, Path("/x"))
    assert v1.quota_files(0.25) == {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "25000"}
    assert v1.quota_files(None) == {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1"}
    assert v2.quota_files(1.5) == {"cpu.max": "150000 100000"}
    assert v2.quota_files(None) == {"cpu.max": "max 100000"}
    assert v1.quota_files(0.001)["cpu.cfs_quota_us"] == "1000"  # the kernel's minimum
    with pytest.raises(LabError, match="`cores` must be > 0 or None, got 0; fix:"):
        v1.quota_files(0)


def test_v1_group_lifecycle_on_a_fake_root(tmp_path):
    cgroups = CpuCgroups.detect(fake_v1(tmp_path).parent)
    group = cgroups.create("tfl1n1-h0")
    for name in ("cgroup.procs", "cpu.cfs_quota_us", "cpu.cfs_period_us"):  # the kernel would make these
        (group / name).write_text("")
    assert cgroups.procs("tfl1n1-h0") == group / "cgroup.procs"
    cgroups.set_quota("tfl1n1-h0", 0.5)
    assert ((group / "cpu.cfs_quota_us").read_text(), (group / "cpu.cfs_period_us").read_text()) == (
        "50000", "100000")
    (group / "cgroup.procs").write_text("12\n34\n")
    assert cgroups.members("tfl1n1-h0") == [12, 34]
    for name in ("cgroup.procs", "cpu.cfs_quota_us", "cpu.cfs_period_us"):
        (group / name).unlink()
    cgroups.remove("tfl1n1-h0")
    assert not group.exists() and cgroups.members("tfl1n1-h0") == []
    cgroups.remove("tfl1n1-h0")  # already gone: fine


def test_v2_group_enables_the_cpu_controller_and_writes_cpu_max(tmp_path):
    cgroups = CpuCgroups.detect(fake_v2(tmp_path))
    group = cgroups.create("tfl1n1-h0")
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    (group / "cpu.max").write_text("")
    cgroups.set_quota("tfl1n1-h0", 0.25)
    assert (group / "cpu.max").read_text() == "25000 100000"


def test_a_group_that_will_not_go_names_its_processes(tmp_path):
    cgroups = CpuCgroups.detect(fake_v1(tmp_path).parent)
    group = cgroups.create("tfl1n1-h0")
    (group / "cgroup.procs").write_text("12\n")  # a regular file keeps the fake directory non-empty
    with pytest.raises(LabError, match=r"could not remove cgroup .*tfl1n1-h0.*fix: kill the processes"):
        cgroups.remove("tfl1n1-h0", timeout=0.1)


def test_a_quota_file_that_cannot_be_written_is_a_lab_error(tmp_path):
    cgroups = CpuCgroups(1, tmp_path)
    (tmp_path / "g").mkdir()
    with pytest.raises(LabError, match="could not write .*cpu.cfs_period_us.*fix:"):
        cgroups.set_quota("g", 0.5)  # no such file (the kernel would have made it)


# --- memory cgroups: v1 and v2 on fake roots -----------------------------------------------------------
def fake_memory_v1(root: Path, swap: bool = True) -> Path:
    base = root / "memory"
    base.mkdir(parents=True)
    for name in ("memory.limit_in_bytes", *(["memory.memsw.limit_in_bytes"] if swap else [])):
        (base / name).write_text("9223372036854771712\n")
    return base


def test_detects_the_memory_controller_v1_and_v2(tmp_path):
    base = fake_memory_v1(tmp_path / "a")
    assert MemoryCgroups.detect(tmp_path / "a") == MemoryCgroups(1, base)
    assert MemoryCgroups.detect(fake_v2(tmp_path / "b")) == MemoryCgroups(2, tmp_path / "b")
    assert MemoryCgroups.detect(fake_v2(tmp_path / "c", controllers="cpu pids")) is None
    assert MemoryCgroups.detect(tmp_path / "absent") is None
    fake_v1(tmp_path / "d")
    assert lab_trees(tmp_path / "d") == [CpuCgroups(1, tmp_path / "d" / "cpu")]  # no memory: cpu only


def test_memory_limit_files_cap_swap_too_in_an_order_the_kernel_accepts():
    v1, v2 = MemoryCgroups(1, Path("/x")), MemoryCgroups(2, Path("/x"))
    # memsw may never be below limit_in_bytes: lift it, set the limit, then set memsw to the same
    assert v1.limit_files(768 << 20) == [("memory.memsw.limit_in_bytes", "-1"),
                                         ("memory.limit_in_bytes", "805306368"),
                                         ("memory.memsw.limit_in_bytes", "805306368")]
    assert v1.limit_files(None) == [("memory.memsw.limit_in_bytes", "-1"), ("memory.limit_in_bytes", "-1"),
                                    ("memory.memsw.limit_in_bytes", "-1")]
    assert v1.limit_files(1 << 30, swap=False) == [("memory.limit_in_bytes", "1073741824")]
    assert v2.limit_files(1 << 30) == [("memory.max", "1073741824"), ("memory.swap.max", "0")]
    assert v2.limit_files(None) == [("memory.max", "max"), ("memory.swap.max", "max")]
    assert v2.limit_files(1 << 30, swap=False) == [("memory.max", "1073741824")]
    for bad in (0, 1000, 1.5e9, True, "1G"):
        with pytest.raises(LabError, match=r"memory limit must be a whole number of bytes >= .*; fix: pass e\.g\."):
            v1.limit_files(bad)


def test_v1_memory_group_lifecycle_on_a_fake_root(tmp_path):
    memory = MemoryCgroups.detect(fake_memory_v1(tmp_path).parent)
    group = memory.create("tfl1n1-h0")
    for name in ("cgroup.procs", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):  # the kernel's
        (group / name).write_text("")
    memory.set_limit("tfl1n1-h0", 512 << 20)
    assert (group / "memory.limit_in_bytes").read_text() == str(512 << 20)
    assert (group / "memory.memsw.limit_in_bytes").read_text() == str(512 << 20)
    memory.set_limit("tfl1n1-h0", None)
    assert (group / "memory.limit_in_bytes").read_text() == "-1"
    (group / "memory.memsw.limit_in_bytes").unlink()  # a kernel without swap accounting: the limit alone
    memory.set_limit("tfl1n1-h0", 256 << 20)
    assert not (group / "memory.memsw.limit_in_bytes").exists()
    for name in ("cgroup.procs", "memory.limit_in_bytes"):
        (group / name).unlink()
    memory.remove("tfl1n1-h0")
    assert not group.exists()


def test_v2_memory_group_enables_the_controller_and_writes_memory_max_and_no_swap(tmp_path):
    memory = MemoryCgroups.detect(fake_v2(tmp_path))
    cpu = CpuCgroups.detect(tmp_path)
    group = cpu.create("tfl1n1-h0")
    assert memory.create("tfl1n1-h0") == group  # one directory holds both controllers in v2
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory"  # the fake keeps the last write
    for name in ("memory.max", "memory.swap.max"):
        (group / name).write_text("")
    memory.set_limit("tfl1n1-h0", 1 << 30)
    assert ((group / "memory.max").read_text(), (group / "memory.swap.max").read_text()) == ("1073741824", "0")


def test_a_memory_file_that_cannot_be_written_is_a_lab_error(tmp_path):
    memory = MemoryCgroups(1, tmp_path)
    (tmp_path / "g").mkdir()
    with pytest.raises(LabError, match="could not write .*memory.limit_in_bytes.*fix: run as root"):
        memory.set_limit("g", 1 << 30)


def test_the_wrapper_joins_every_cgroup_then_mounts_the_memory_tree_inside():
    procs = [Path("/sys/fs/cgroup/cpu/tfl1n1-h1/cgroup.procs"), Path("/sys/fs/cgroup/memory/tfl1n1-h1/cgroup.procs")]
    argv = labspec.wrap_argv("h1", "tfl1n1-h1", ["python", "-c", "print(1)"], procs, {"sh": "/bin/sh"},
                             memory_mount=1)
    assert argv[:4] == ["/bin/sh", "-c", 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; '
                        'shift; exec "$@"', "tfdist-lab"]
    assert argv[4:7] == [str(procs[0]), str(procs[1]), "--"]
    rest = argv[7:]
    assert rest[:4] == ["ip", "netns", "exec", "tfl1n1-h1"]
    assert "mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory" in rest[9]
    assert rest[-5:] == ["hostname", "h1", "python", "-c", "print(1)"]
    # one tree for both controllers (v2): joined once
    one = labspec.wrap_argv("h1", "ns", ["true"], [procs[0], procs[0]], memory_mount=2)
    assert one[:5] == ["sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "tfdist-lab", str(procs[0])]
    assert "mount -t cgroup2 cgroup2 /sys/fs/cgroup" in one[-5]


def test_the_wrappers_shell_steps_run(tmp_path):
    """The join loop and the mount step as a shell runs them (the mount fails unprivileged: skipped)."""
    files = [tmp_path / "a", tmp_path / "b"]
    argv = labspec.wrap_argv("h1", "ns", ["true"], files)
    join = argv[: argv.index("--") + 1] + ["sh", "-c", 'echo "$$" > "$1"', "x", str(tmp_path / "child")]
    result = subprocess.run(join, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    pids = {files[0].read_text().strip(), files[1].read_text().strip(), (tmp_path / "child").read_text().strip()}
    assert len(pids) == 1  # every exec kept the pid: the task itself is in both groups
    script = labspec.wrap_argv("h1", "ns", ["true"], None, memory_mount=1)[9]
    ran = subprocess.run(["sh", "-c", script.replace("mount ", "false ").replace("mkdir ", "false "),
                          "tfdist-lab", "echo", "still runs"], capture_output=True, text=True, timeout=30)
    assert ran.stdout.strip() == "still runs" and ran.stderr == ""  # a failed mount leaves the rest running


def test_leftovers_list_memory_cgroups_of_a_dead_owner(tmp_path):
    cgroup_root = tmp_path / "cgroup"
    fake_v1(cgroup_root)
    memory = fake_memory_v1(cgroup_root)
    (memory / "tfl99999999n1-h0").mkdir()  # beyond any pid_max: its owner is dead
    (cgroup_root / "cpu" / "tfl99999999n1-h0").mkdir()
    found = labsweep.scan(tmp_path / "labs", cgroup_root)["tfl99999999n1"]
    assert f"cgroup {memory / 'tfl99999999n1-h0'}" in found
    assert f"cgroup {cgroup_root / 'cpu' / 'tfl99999999n1-h0'}" in found
    both = fake_v2(tmp_path / "v2")
    (both / "tfl99999999n2-h0").mkdir()
    assert labsweep.scan(tmp_path / "labs", both)["tfl99999999n2"] == [f"cgroup {both / 'tfl99999999n2-h0'}"]


# --- ownership and errors before anything is built -----------------------------------------------------
def test_a_lab_is_stale_when_its_owner_is_dead_or_its_pid_was_reused(tmp_path):
    me = os.getpid()
    assert labsweep.owner_alive(f"tfl{me}n1", tmp_path)  # no owner file yet: trust the pid
    (tmp_path / f"tfl{me}n1").mkdir()
    (tmp_path / f"tfl{me}n1" / "owner").write_text(f"{me} {labsweep.start_time(me)}\n")
    assert labsweep.owner_alive(f"tfl{me}n1", tmp_path)
    (tmp_path / f"tfl{me}n2").mkdir()
    (tmp_path / f"tfl{me}n2" / "owner").write_text(f"{me} 1\n")  # another process once had this pid
    assert not labsweep.owner_alive(f"tfl{me}n2", tmp_path)
    assert not labsweep.owner_alive("tfl99999999n1", tmp_path)  # beyond any pid_max


def test_not_root_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="needs root .* uid 1000; fix: run the tests as root"):
        netlab.Lab(["h0"])


@pytest.mark.parametrize(("tool", "package"),
                         [("sshd", "openssh-server"), ("ip", "iproute2"), ("tc", "iproute2")])
def test_a_missing_tool_names_its_package_and_make_setup(monkeypatch, tool, package):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name, **kw: None if name == tool else f"/usr/bin/{name}")
    expected = rf"`{tool}` \(Debian package {package}\) is not installed; fix: run `make setup`"
    with pytest.raises(LabError, match=expected):
        netlab.Lab(["h0"])


def test_bad_hosts_fail_before_anything_is_checked_or_built(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="listed twice"):
        netlab.Lab(["h0", "h0"])


def test_a_zombie_owner_counts_as_dead(tmp_path):
    child = subprocess.Popen(["true"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: a zombie
        assert labsweep.start_time(child.pid) is None
        assert not labsweep.owner_alive(f"tfl{child.pid}n1", tmp_path)
    finally:
        child.wait()
    assert labsweep.start_time(os.getpid()) is not None
