"""`tfdist launch --hosts` on the network lab: tf.distribute jobs across hosts over ssh, and link faults.

The launcher runs on h0 (a login node: no task of its own) and starts every task over the lab's
ssh on h1..h3. Layout of the parameter-server jobs (`--hosts h1:1,h2:1,h3:1 --workers 2 --ps 1`,
the default placement; the chief takes no slot): chief and worker:0 on h1, worker:1 on h2, ps:0
on h3. So cutting h2 loses a worker only, and cutting h3 loses the ps only.

The fault tests print the time from the cut to the job's reaction (``REACTION ...`` lines, shown
with ``pytest -s``); the bounds asserted are generous timeouts that only a hang breaks.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lab_jobs import JOB_TIMEOUT, Launch
from support import assert_nothing_left, readme_launch_options, subprocess_env

PS_LAYOUT = readme_launch_options("--hosts h1:1,h2:1,h3:1 --workers 2 --ps 1")  # the README's command
#: The fault tests' gRPC keepalive (TF_GRPC_DEFAULT_OPTIONS, which tfdist keeps over its own 10 s +
#: 10 s, `tfdist.cluster.tf_config.merge_grpc_options`): an RPC to a host behind a cut link fails
#: after a few seconds of unanswered pings instead of 10-20 s, so the job reacts sooner, the same way
FAST_KEEPALIVE = {"TF_GRPC_DEFAULT_OPTIONS": "grpc.keepalive_time_ms=3000,grpc.keepalive_timeout_ms=3000"}


def epochs(outdir: Path) -> list[tuple[int, float]]:
    path = outdir / "epochs.txt"
    if not path.exists():
        return []
    return [(int(e), float(loss)) for e, loss in (line.split() for line in path.read_text().splitlines())]


def await_epochs(outdir: Path, job: Launch, count: int, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while len(epochs(outdir)) < count:
        if job.process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"epoch {count - 1} never finished:\n{job.tail()}")
        time.sleep(0.1)
    return time.monotonic()


def listening(lab, host: str) -> list[str]:
    """``ADDRESS:PORT`` of every listening TCP socket on ``host``."""
    table = lab.run(host, ["ss", "-ltnH"], timeout=30).stdout
    local = [line.split()[3] for line in table.splitlines() if line.strip()]
    return [re.sub(r"^\[::ffff:([0-9.]+)\]", r"\1", address) for address in local]  # the shim binds v4-mapped


_PROBE = ("import socket, sys\n"
          "try:\n"
          "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close(); print('open')\n"
          "except OSError:\n"
          "    print('closed')\n")


def test_a_parameter_server_job_across_three_hosts(make_lab, tmp_path):
    lab = make_lab(["h0", "h1", "h2", "h3"])
    job = Launch(lab, *PS_LAYOUT, script="ps_train.py", args=("plain", str(tmp_path)))
    job.await_line(r"^\[ps:0@h3\] +\[tfdist\] ps:0 serving")
    banner = job.output
    ps_port = re.search(r"ps:0 on h3:(\d+)", banner)
    assert ps_port, banner
    ps_address = f"{lab.address('h3')}:{ps_port[1]}"
    sockets = listening(lab, "h3")  # while the job runs: the ps serves until the chief is done
    reach = lab.run("h0", [sys.executable, "-c", _PROBE, lab.address("h3"), ps_port[1]], timeout=60)
    loopback = lab.run("h3", [sys.executable, "-c", _PROBE, "127.0.0.1", ps_port[1]], timeout=60)
    code = job.wait()
    assert code == 0, job.tail()
    assert [a for a in sockets if a.endswith(f":{ps_port[1]}")] == [ps_address], sockets  # h3's address only
    assert reach.stdout.strip() == "open", reach.stderr  # another host reaches the ps on h3's address
    assert loopback.stdout.strip() == "closed"  # and it does not listen on h3's loopback
    assert "chief:0 on h1:" in banner and "worker:0 on h1:" in banner and "worker:1 on h2:" in banner
    for prefix in ("[chief:0@h1]", "[worker:0@h1]", "[worker:1@h2]", "[ps:0@h3]"):
        assert any(line.startswith(prefix) for _, line in job.lines), f"no {prefix} line:\n{job.tail()}"
    result = json.loads((tmp_path / "chief.json").read_text())
    assert (result["kind"], result["num_workers"], result["num_ps"]) == ("parameter_server", 2, 1)
    assert result["loss"][-1] < 0.2 * result["loss"][0]
    # the variables live on ps:0, which TF_CONFIG (the banner) puts on h3
    assert all(device.startswith("/job:ps/replica:0/task:0") for device in result["embedding_devices"])
    assert_nothing_left(lab)


def test_multi_worker_mirrored_across_two_hosts(make_lab, tmp_path):
    lab = make_lab(["h0", "h1", "h2"])
    job = Launch(lab, *readme_launch_options("--backend multi_worker_mirrored"), script="mwms_train.py",
                 args=(str(tmp_path),))
    assert job.wait() == 0, job.tail()
    assert "worker:0 on h1:" in job.output and "worker:1 on h2:" in job.output
    workers = [json.loads((tmp_path / f"worker{rank}.json").read_text()) for rank in (0, 1)]
    assert [(w["kind"], w["rank"], w["is_chief"], w["replicas"]) for w in workers] == [
        ("multi_worker_mirrored", 0, True, 2), ("multi_worker_mirrored", 1, False, 2)]
    for w0, w1 in zip(workers[0]["weights"], workers[1]["weights"]):
        np.testing.assert_allclose(np.array(w0), np.array(w1), rtol=1e-6)  # in sync across the hosts
    assert workers[0]["loss"][-1] < 0.2 * workers[0]["loss"][0]
    assert any(line.startswith("[worker:1@h2]") for _, line in job.lines)
    assert_nothing_left(lab)


def test_a_worker_hosts_link_cut_mid_training_does_not_stop_the_job(make_lab, tmp_path):
    """h2 stays cut to the end, and its sshd (stock: no ClientAlive keepalives) never ends the
    session: worker:1 is stopped by its supervisor, which misses the launcher's heartbeats."""
    lab = make_lab(["h0", "h1", "h2", "h3"])
    job = Launch(lab, *PS_LAYOUT, script="ps_train.py", args=("plain", str(tmp_path)), env=FAST_KEEPALIVE)
    await_epochs(tmp_path, job, 1)
    assert lab.task_processes("h2", sessions=False)  # worker:1 and its supervisor run there
    lab.cut("h2")  # worker:1's host: neither the chief nor the ps
    cut = time.monotonic()
    done_before = len(epochs(tmp_path))
    gone = resumed = None
    while gone is None or resumed is None:  # both watched at once, each time taken when first seen
        now = time.monotonic()
        if resumed is None and len(epochs(tmp_path)) > done_before:
            resumed = now
        if gone is None and not lab.task_processes("h2", sessions=False):
            gone = now  # while h2 is still cut: nothing but the missed heartbeats can have done it
        if now - cut > 120 and gone is None:
            left = lab.task_processes("h2", sessions=False)
            pytest.fail(f"tasks still on h2 120 s after its link was cut: {left}")
        if (job.process.poll() is not None or now - cut > JOB_TIMEOUT) and resumed is None:
            pytest.fail(f"no epoch finished after the cut:\n{job.tail()}")
        time.sleep(0.2)
    code = job.wait()
    ended = time.monotonic()
    print(f"REACTION worker host cut: h2's tasks gone {gone - cut:.1f} s after the cut, the next epoch "
          f"finished by {resumed - cut:.1f} s after it, the job ended {ended - cut:.1f} s after it "
          f"(exit {code})")
    assert code == 0, job.tail()
    losses = [loss for _, loss in epochs(tmp_path)]
    assert [epoch for epoch, _ in epochs(tmp_path)] == [0, 1, 2, 3]
    assert losses[-1] < losses[0]
    assert_nothing_left(lab, cut=("h2",))


def test_the_ps_hosts_link_cut_fails_the_chief_with_the_clear_error(make_lab, tmp_path):
    lab = make_lab(["h0", "h1", "h2", "h3"])
    job = Launch(lab, *PS_LAYOUT, script="ps_train.py", args=("plain", str(tmp_path)), env=FAST_KEEPALIVE)
    await_epochs(tmp_path, job, 1)
    lab.cut("h3")  # ps:0's host
    cut = time.monotonic()
    code = job.wait()
    ended = time.monotonic()
    error = job.first(r"ParameterServerError: the parameter-server job lost ps:0")
    after = "never came" if error is None else f"came {error - cut:.1f} s"
    print(f"REACTION ps host cut: the chief's error {after} after the cut, the job ended "
          f"{ended - cut:.1f} s after it (exit {code})")
    assert code != 0
    assert error is not None, job.tail()
    assert "fix: restart the whole cluster" in job.output
    assert ended - cut < 300, "the job took minutes to give up after losing its ps"  # only a hang breaks this
    assert_nothing_left(lab, cut=("h3",))  # the ps's supervisor stopped it: no heartbeats came


# A task that only sleeps, after saying where it runs (no TensorFlow: these tests are about processes).
_SLEEPER = ("import json, os, socket, time\n"
            "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
            "print('up', task['type'], task['index'], 'on', socket.gethostname(), flush=True)\n"
            "time.sleep(600)\n")


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_stopping_or_killing_the_launcher_stops_every_remote_task(make_lab, how):
    """SIGTERM: the launcher closes every supervisor's stdin (TERM, grace, KILL on each host). SIGKILL:
    the ssh clients die with it (parent-death signal), the hosts' sshd end the sessions, and the
    supervisors see EOF just the same."""
    lab = make_lab(["h0", "h1", "h2", "h3"])
    job = Launch(lab, *PS_LAYOUT, script=_SLEEPER)
    for pattern in (r"^\[chief:0@h1\] +up chief 0 on h1$", r"^\[worker:0@h1\] +up worker 0 on h1$",
                    r"^\[worker:1@h2\] +up worker 1 on h2$", r"^\[ps:0@h3\] +up ps 0 on h3$"):
        job.await_line(pattern, timeout=120)  # each task runs on its own host (its hostname says so)
    assert all(lab.task_processes(host) for host in ("h1", "h2", "h3"))
    job.process.send_signal(how)
    code = job.wait(timeout=120)
    assert code == (130 if how == signal.SIGTERM else -signal.SIGKILL), job.tail()
    assert_nothing_left(lab, timeout=60)


def test_an_unreachable_host_stops_the_launch_before_anything_starts(make_lab):
    lab = make_lab(["h0", "h1", "h2"])
    lab.cut("h2")
    job = Launch(lab, "--hosts", "h1:2,h2:1", "--workers", "1", "--ps", "1", script=_SLEEPER)
    assert job.wait(timeout=180) == 2
    assert "cannot start the job, nothing was started: ssh to h2 failed" in job.output, job.tail()
    assert "fix: make `ssh h2 true` work without a password" in job.output
    assert " up " not in job.output  # not even the tasks of the reachable host
    assert_nothing_left(lab, timeout=30)


def test_the_ssh_wrapper_runs_a_command_on_the_host_and_a_cut_link_stops_it(make_lab, tmp_path):
    """horovodrun's ssh (tfdist.launch.ssh_wrapper), called as horovodrun calls ssh: the command runs
    on the host under the supervisor, its output and exit code come back, and when the link is cut
    the command is gone within a bounded time while the host is still cut (missed heartbeats)."""
    from tfdist.launch.ssh_wrapper import install

    lab = make_lab(["h0", "h1"])
    env = subprocess_env(PATH=f"{install(tmp_path)}:/usr/bin:/bin")
    # horovodrun runs `ssh ... HOST -p P -i K 'COMMAND'` through a shell (safe_shell_exec)
    horovod_ssh = (f"ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no h1 -p {lab.ssh_port} "
                   f"-i {lab.identity_file}")
    done = lab.run("h0", ["sh", "-c", f"{horovod_ssh} 'cd /tmp > /dev/null 2>&1 ; hostname; exit 3'"],
                   env=env, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (3, "h1"), done.stderr
    # SIGTERM (what horovodrun sends its ssh commands on Ctrl-C): the remote command is stopped too
    stopped = lab.popen("h0", ["sh", "-c", f"exec {horovod_ssh} 'echo started; exec sleep 600'"], env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert stopped.stdout.readline().strip() == "started"
        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(timeout=60) == 128 + signal.SIGTERM  # the command's own end, through ssh
        assert_nothing_left(lab, timeout=30)
    finally:
        stopped.kill()
        stopped.wait()
    sleeper = lab.popen("h0", ["sh", "-c", f"exec {horovod_ssh} 'echo started; exec sleep 600'"], env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sleeper.stdout.readline().strip() == "started"
        assert any("sleep 600" in line for line in lab.task_processes("h1", sessions=False))
        lab.cut("h1")
        cut = time.monotonic()
        while lab.task_processes("h1", sessions=False):
            assert time.monotonic() - cut < 120, lab.task_processes("h1", sessions=False)
            time.sleep(0.2)
        gone = time.monotonic()
        code = sleeper.wait(timeout=120)  # the wrapper's ssh gives up on the silent server (255)
        print(f"REACTION ssh wrapper: the command on the cut host gone {gone - cut:.1f} s after the cut, "
              f"the wrapper exited {time.monotonic() - cut:.1f} s after it with {code}")
        assert code == 255
    finally:
        sleeper.kill()
        sleeper.wait()
    assert_nothing_left(lab, cut=("h1",))
