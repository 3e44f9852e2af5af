"""The network lab itself: ssh between hosts, names, link rates, CPU quotas, memory caps, cuts, clean-up.

Timing checks compare two runs in the same test (a ratio), or use bounds that a loaded machine can
only make easier to meet (a shaped link is never *faster* than its rate; a quota never gives *more*
CPU): the machine is shared, so nothing here asserts that something is fast.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfdist.testing.cgroups import CpuCgroups
from tfdist.testing.netlab import Lab, LabError, leftovers

PYTHON = sys.executable

# Receiver: accept one connection, read to EOF, answer one byte. Sender: send N bytes, wait for the byte.
TRANSFER = r"""
import socket, sys, time
mode, address, port, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "receive":
    server = socket.create_server((address, port))
    print("listening", flush=True)
    conn, _ = server.accept()
    got = 0
    while chunk := conn.recv(1 << 16):
        got += len(chunk)
    conn.sendall(b"k")
    print(got, flush=True)
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.settimeout(120)
    payload = b"x" * size
    start = time.monotonic()
    conn.sendall(payload)
    conn.shutdown(socket.SHUT_WR)
    assert conn.recv(1) == b"k"
    print(time.monotonic() - start, flush=True)
"""

# Busy loop for `seconds` of wall time; prints the CPU share it got (process CPU time / wall time).
BUSY = r"""
import sys, time
seconds = float(sys.argv[1])
wall0, cpu0 = time.monotonic(), time.process_time()
count = 0
while time.monotonic() - wall0 < seconds:
    count += 1
print((time.process_time() - cpu0) / (time.monotonic() - wall0), count)
"""


UP_OR_DOWN = ("import socket, sys\n"
              "try:\n"
              "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()\n"
              "    print('up')\n"
              "except OSError:\n"
              "    print('down')\n")


def ssh(lab: Lab, target: str, *command: str) -> list[str]:
    return ["ssh", "-p", str(lab.ssh_port), "-i", str(lab.identity_file), target, *command]


def transfer_seconds(lab: Lab, sender: str, receiver: str, size: int, port: int) -> float:
    """Seconds to push ``size`` bytes from ``sender`` to ``receiver`` over TCP (until acknowledged)."""
    address = lab.address(receiver)
    server = lab.popen(receiver, [PYTHON, "-c", TRANSFER, "receive", address, str(port), str(size)],
                       stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        sent = lab.run(sender, [PYTHON, "-c", TRANSFER, "send", address, str(port), str(size)], timeout=180)
        assert sent.returncode == 0, sent.stderr
        assert int(server.stdout.readline()) == size
        return float(sent.stdout)
    finally:
        server.kill()
        server.wait()


def reachable(address: str, port: int, timeout: float = 2.0) -> bool:
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def test_ssh_from_one_host_to_another_runs_on_that_host(make_lab):
    lab = make_lab(["h0", "h1"])
    command = "hostname; getent hosts $(hostname); cat /proc/self/cgroup"
    result = lab.run("h0", ssh(lab, "h1", command), timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "h1"
    assert lines[1].split() == [lab.address("h1"), "h1"]  # the session sees h1's /etc/hosts (Gloo needs it)
    # the ssh session runs in h1's cpu cgroup, so a CPU limit on h1 covers what ssh starts there
    assert CpuCgroups.detect() is None or any(lab.namespace("h1") in line for line in lines[2:])
    by_address = lab.run("h1", ssh(lab, lab.address("h0"), "hostname"), timeout=60)
    assert (by_address.returncode, by_address.stdout.strip()) == (0, "h0"), by_address.stderr


def test_ssh_refuses_a_key_that_is_not_the_labs(make_lab, tmp_path):
    lab = make_lab(["h0", "h1"])
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    result = lab.run("h0", ["ssh", "-p", str(lab.ssh_port), "-i", str(stranger), "-o", "IdentitiesOnly=yes",
                            "h1", "hostname"], timeout=60)
    assert result.returncode == 255 and "h1" not in result.stdout


def test_every_host_resolves_its_own_name_and_the_others(make_lab):
    lab = make_lab(["h0", "h1", "h2"])
    code = ("import json, socket; name = socket.gethostname(); "
            "print(json.dumps([name, socket.gethostbyname(name), socket.gethostbyname('h2')]))")
    for host in lab.hosts:
        result = lab.run(host, [PYTHON, "-c", code], timeout=60)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == [host, lab.address(host), lab.address("h2")]
    assert len({lab.address(host) for host in lab.hosts}) == 3


def test_sshd_listens_on_the_hosts_own_address_only(make_lab):
    lab = make_lab(["h0", "h1"])
    code = ("import socket, sys\n"
            "def up(address):\n"
            "    try:\n"
            "        socket.create_connection((address, int(sys.argv[2])), timeout=2).close(); return True\n"
            "    except OSError:\n"
            "        return False\n"
            "print(up(sys.argv[1]), up('127.0.0.1'))\n")
    result = lab.run("h1", [PYTHON, "-c", code, lab.address("h1"), str(lab.ssh_port)], timeout=60)
    assert result.stdout.split() == ["True", "False"], result.stderr


def test_shaping_limits_both_directions_of_a_link(make_lab):
    lab = make_lab(["h0", "h1"])
    size, rate_mbit = 5_000_000, 20
    at_rate = size * 8 / (rate_mbit * 1e6)  # 2 s: the least a shaped transfer can take
    free_in = transfer_seconds(lab, "h0", "h1", size, 5001)
    free_out = transfer_seconds(lab, "h1", "h0", size, 5002)
    lab.shape("h1", rate_mbit=rate_mbit)
    shaped_in = transfer_seconds(lab, "h0", "h1", size, 5003)   # h1 receiving: the root-side veth
    shaped_out = transfer_seconds(lab, "h1", "h0", size, 5004)  # h1 sending: eth0 inside h1
    print(f"5 MB: unshaped {free_in:.2f} s in / {free_out:.2f} s out; "
          f"20 Mbit/s {shaped_in:.2f} / {shaped_out:.2f} s")
    assert shaped_in > 0.8 * at_rate and shaped_out > 0.8 * at_rate
    assert shaped_in > 2 * free_in and shaped_out > 2 * free_out
    lab.shape("h1", rate_mbit=None)  # lifted: faster than the shaping could ever allow
    # Compared with the rate's own time, not with a measurement a loaded machine can stretch: a shaped
    # transfer never takes less than 0.8 x at_rate (asserted above). Load only slows a transfer for a
    # while, shaping for good, so the best of three attempts counts.
    lifted = []
    for port in (5005, 5006, 5007):
        lifted.append(transfer_seconds(lab, "h0", "h1", size, port))
        if lifted[-1] < 0.5 * at_rate:
            break
    assert min(lifted) < 0.5 * at_rate, lifted


def test_a_cpu_quota_slows_everything_on_the_host_including_ssh_sessions(make_lab):
    lab = make_lab(["h0", "h1", "h2"])
    lab.limit_cpu("h1", cores=0.05)
    limited = lab.popen("h0", ssh(lab, "h1", PYTHON, "-c", f"'{BUSY}'", "3"), stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    free = lab.run("h2", [PYTHON, "-c", BUSY, "3"], timeout=120)
    limited_out, limited_err = limited.communicate(timeout=120)
    assert limited.returncode == 0 and free.returncode == 0, limited_err + free.stderr
    limited_share, limited_count = map(float, limited_out.split())
    free_share, free_count = map(float, free.stdout.split())
    print(f"CPU share: {limited_share:.3f} under a 0.05-core quota, {free_share:.3f} without")
    assert limited_share < 0.1  # a quota never gives more; a loaded machine only gives less
    assert limited_count < free_count / 2 and limited_share < free_share / 2


def test_cut_makes_a_host_unreachable_and_restore_brings_it_back(make_lab):
    lab = make_lab(["h0", "h1"])
    check = [PYTHON, "-c", UP_OR_DOWN, lab.address("h1"), str(lab.ssh_port)]
    assert lab.run("h0", check, timeout=60).stdout.strip() == "up"
    lab.cut("h1")
    assert lab.run("h0", check, timeout=60).stdout.strip() == "down"
    assert not reachable(lab.address("h1"), lab.ssh_port)  # from the machine itself as well
    lab.restore("h1")
    deadline = time.monotonic() + 30
    while lab.run("h0", check, timeout=60).stdout.strip() != "up":
        assert time.monotonic() < deadline, "h1 still unreachable 30 s after restore"
    result = lab.run("h0", ssh(lab, "h1", "hostname"), timeout=60)
    assert result.stdout.strip() == "h1", result.stderr


def test_pids_lists_what_runs_on_a_host(make_lab):
    lab = make_lab(["h0", "h1"])
    sleeper = lab.popen("h1", ["sleep", "60"])
    try:
        assert sleeper.pid in lab.pids("h1") and sleeper.pid not in lab.pids("h0")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sleeper.pid not in lab.pids("h1")


CHILD_LAB = r"""
import sys, time
from tfdist.testing.netlab import Lab
lab = Lab(["c0", "c1"])
ssh = ["ssh", "-p", str(lab.ssh_port), "-i", str(lab.identity_file)]
result = lab.run("c0", [*ssh, "c1", "hostname"], timeout=60)
print(lab.lab_id, lab.address("c0"), result.stdout.strip(), flush=True)
if sys.argv[1] == "close":
    with lab:
        time.sleep(float(sys.argv[2]))
else:
    time.sleep(float(sys.argv[2]))   # atexit closes it on a normal exit; SIGKILL leaves it to the sweep
"""


def start_child_lab(how: str, seconds: float) -> tuple[subprocess.Popen, list[str]]:
    child = subprocess.Popen([PYTHON, "-c", CHILD_LAB, how, str(seconds)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline().split()
    if len(line) != 3:
        child.kill()
        pytest.fail(f"the child lab did not start: {child.communicate()[1][-2000:]}")
    return child, line


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for init to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def resources_of(lab_id: str) -> list[str]:
    names = [*os.listdir("/run/netns"), *os.listdir("/sys/class/net")]
    return [name for name in names if name.startswith(lab_id)]


def test_two_labs_at_once_do_not_collide(make_lab):
    first, second = make_lab(["h0", "h1"]), make_lab(["h0", "h1"])
    child, (child_id, child_address, child_hostname) = start_child_lab("close", 30)  # another process
    try:
        assert child_hostname == "c1"
        ids = {first.lab_id, second.lab_id, child_id}
        subnets = {address.rsplit(".", 1)[0] for address in (first.address("h0"), second.address("h0"),
                                                             child_address)}
        assert len(ids) == 3 and len(subnets) == 3
        for lab in (first, second):
            result = lab.run("h0", ssh(lab, "h1", "hostname"), timeout=60)
            assert result.stdout.strip() == "h1", result.stderr
        # h0 of one lab cannot reach h1 of the other: separate bridges
        across = [PYTHON, "-c", UP_OR_DOWN, second.address("h1"), str(second.ssh_port)]
        assert first.run("h0", across, timeout=60).stdout.strip() == "down"
        first.close()
        result = second.run("h0", ssh(second, "h1", "hostname"), timeout=60)
        assert result.stdout.strip() == "h1", result.stderr
        assert resources_of(first.lab_id) == [] and resources_of(child_id) != []
    finally:
        child.send_signal(signal.SIGINT)  # Ctrl-C in the child: its `with` block closes its lab
        child.communicate(timeout=60)
    assert resources_of(child_id) == []
    assert [item for item in leftovers() if child_id in item] == []


def test_a_lab_whose_owner_was_killed_is_swept_by_the_next(make_lab):
    child, (child_id, _, _) = start_child_lab("leave", 300)
    listed = subprocess.run(["ip", "netns", "pids", f"{child_id}-c1"], capture_output=True, text=True,
                            check=True)
    sshds = [int(pid) for pid in listed.stdout.split()]
    assert sshds
    child.kill()
    child.communicate()
    stale = [item for item in leftovers() if child_id in item]
    assert {item.split()[0] for item in stale} >= {"netns", "link", "dir", "process"}
    make_lab(["h0"])
    assert [item for item in leftovers() if child_id in item] == []
    assert resources_of(child_id) == []
    assert not any(alive(pid) for pid in sshds)


def test_a_lab_left_open_is_closed_at_exit():
    child, (child_id, _, _) = start_child_lab("leave", 0)
    child.communicate(timeout=60)
    assert child.returncode == 0
    assert resources_of(child_id) == [] and [item for item in leftovers() if child_id in item] == []


#: Allocates argv[1] MiB and touches every page; exits 0 if it got them.
HOG = "import sys; block = bytearray(int(sys.argv[1]) << 20); print(len(block) >> 20)"
#: What a task on the host reads of its own memory cgroup (tfdist.launch.oom, as the supervisor does).
RECORD = "from tfdist.launch import oom; r = oom.snapshot(); print(r.kills, r.limit)"


def test_close_removes_everything_even_after_an_error_inside_the_block():
    """And a memory cap: an ssh session beyond it is OOM-killed, a task on the host sees the kill
    counted in its own memory cgroup, with the cap; the cap goes with the lab."""
    with pytest.raises(ZeroDivisionError), Lab(["h0", "h1"]) as lab:
        sshds = lab.pids("h0") + lab.pids("h1")
        sleeper = lab.popen("h1", ["sleep", "300"])
        lab.limit_cpu("h1", cores=0.5)
        lab.shape("h0", rate_mbit=10)
        lab.limit_memory("h1", 128 << 20)
        assert lab.run("h1", [PYTHON, "-c", RECORD], timeout=60).stdout.split() == ["0", str(128 << 20)]
        small = lab.run("h0", ssh(lab, "h1", f"{PYTHON} -c '{HOG}' 32"), timeout=60)
        big = lab.run("h0", ssh(lab, "h1", f"sh -c \"{PYTHON} -c '{HOG}' 512; echo exit \\$?\""), timeout=60)
        free = lab.run("h0", [PYTHON, "-c", HOG, "512"], timeout=60)  # h0 has no cap
        assert small.stdout.strip() == "32", small.stderr
        assert big.stdout.strip() == "exit 137", (big.stdout, big.stderr)  # SIGKILL, sessions capped too
        assert free.stdout.strip() == "512", free.stderr
        kills, limit = lab.run("h1", [PYTHON, "-c", RECORD], timeout=60).stdout.split()
        assert int(kills) >= 1 and int(limit) == 128 << 20
        lab.limit_memory("h1", None)
        assert lab.run("h1", [PYTHON, "-c", HOG, "512"], timeout=60).stdout.strip() == "512"
        with pytest.raises(LabError, match="memory limit must be a whole number of bytes"):
            lab.limit_memory("h1", 100)
        print(1 / 0)
    assert sleeper.poll() is not None and sshds
    assert not any(alive(pid) for pid in sshds)
    assert resources_of(lab.lab_id) == []
    assert not (Path("/etc/netns") / lab.namespace("h0")).exists() and not lab.lab_dir.exists()
    assert not Path(f"/sys/fs/cgroup/cpu/{lab.namespace('h1')}").exists()
    assert not Path(f"/sys/fs/cgroup/memory/{lab.namespace('h1')}").exists()
    assert [item for item in leftovers() if lab.lab_id in item] == []
    lab.close()  # idempotent
    with pytest.raises(LabError, match="closed"):
        lab.popen("h0", ["true"])


def test_unknown_host_is_a_clear_error(make_lab):
    lab = make_lab(["h0"])
    with pytest.raises(LabError, match="'h9' is not a host of this lab.*fix:"):
        lab.address("h9")


def test_run_takes_subprocess_run_arguments(make_lab):
    lab = make_lab(["h0"])
    echoed = lab.run("h0", ["cat"], input="over stdin", capture_output=True, text=True)
    assert (echoed.returncode, echoed.stdout) == (0, "over stdin")
    with pytest.raises(LabError, match=r"on lab host h0 exited with 3: oops.*fix:"):
        lab.run("h0", ["sh", "-c", "echo oops >&2; exit 3"], check=True)
    with pytest.raises(subprocess.TimeoutExpired):
        lab.run("h0", ["sleep", "30"], timeout=0.5)
    deadline = time.monotonic() + 10  # the timed-out command was killed: only sshd is left on h0
    while set(lab.pids("h0")) != {lab.sshd_pid("h0")}:
        assert time.monotonic() < deadline, lab.pids("h0")
        time.sleep(0.1)


def test_latency_is_netem_or_a_clear_error(make_lab):
    lab = make_lab(["h0", "h1"])
    try:
        lab.shape("h1", rate_mbit=None, latency_ms=20)
    except LabError as exc:  # this kernel has no netem: the error says so and how to fix it
        assert "netem" in str(exc) and "fix: load sch_netem" in str(exc)
        return
    code = ("import socket, sys, time; t = time.monotonic(); "
            "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10).close(); "
            "print(time.monotonic() - t)")
    connect = [PYTHON, "-c", code, lab.address("h1"), str(lab.ssh_port)]
    assert float(lab.run("h0", connect, timeout=60).stdout) >= 0.035  # SYN and SYN-ACK both delayed 20 ms


PROBE_TEST = '''
import time

def test_probe(make_lab):
    lab = make_lab(["p0", "p1"])
    print("LAB", lab.lab_id, flush=True)
    time.sleep(300)
'''


def test_a_test_run_stopped_by_sigterm_closes_its_labs(tmp_path):
    """The conftest turns SIGTERM (a CI timeout) into an interrupt: fixtures close their labs."""
    (tmp_path / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    (tmp_path / "test_probe.py").write_text(PROBE_TEST)
    run = subprocess.Popen([PYTHON, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                            "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    lines = []
    for line in run.stdout:
        lines.append(line)
        if line.startswith("LAB "):
            break
    else:
        pytest.fail("the probe test did not start its lab:\n" + "".join(lines)[-3000:])
    lab_id = line.split()[1]
    assert resources_of(lab_id) != []
    run.send_signal(signal.SIGTERM)
    output = run.communicate(timeout=60)[0]
    assert run.returncode != 0 and "KeyboardInterrupt" in output, output[-3000:]
    assert resources_of(lab_id) == [] and [item for item in leftovers() if lab_id in item] == []
