"""A parameter-server job across three lab hosts, wired by hand (no `tfdist launch --hosts`).

TF_CONFIGs come from `tfdist tf-config --format dir`; every task runs the same script on its own lab
host with its server bound to its host's address only, and the servers exit by themselves once the
chief is done. (Moved here from tests/test_multihost.py, which built its own namespaces.)
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from support import SCRIPTS, subprocess_env
from tfdist.launch.bind import exact_bind_env, shim_library
from tfdist.testing.netlab import Lab

pytestmark = pytest.mark.cluster

PROBE = ("import socket, sys, time\n"
         "def up(h):\n"
         "    try:\n"
         "        socket.create_connection((h, int(sys.argv[3])), timeout=1).close(); return True\n"
         "    except OSError:\n"
         "        return False\n"
         "deadline = time.time() + 60\n"
         "while not up(sys.argv[1]) and time.time() < deadline: time.sleep(0.5)\n"
         "print(up(sys.argv[1]), up(sys.argv[2]) if sys.argv[2] != '-' else True)\n")


@pytest.fixture(scope="module")
def lab():
    with Lab(["h1", "h2", "h3"]) as built:
        yield built


def test_parameter_server_job_across_three_hosts(lab, tmp_path):
    configs = tmp_path / "tf_configs"
    chief, worker0, worker1, ps0 = (f"{lab.address('h1')}:2222", f"{lab.address('h2')}:2222",
                                    f"{lab.address('h3')}:2222", f"{lab.address('h3')}:2223")
    generated = subprocess.run([sys.executable, "-m", "tfdist", "tf-config", "--chief", chief,
                                "--worker", worker0, "--worker", worker1, "--ps", ps0,
                                "--format", "dir", "--out", str(configs)],
                               capture_output=True, text=True, env=subprocess_env(), timeout=60, check=False)
    assert generated.returncode == 0, generated.stderr
    library = shim_library()
    placement = {"chief-0": ("h1", chief), "worker-0": ("h2", worker0), "worker-1": ("h3", worker1),
                 "ps-0": ("h3", ps0)}
    processes = {}
    outdir = tmp_path / "out"
    outdir.mkdir()
    try:
        for task, (host, address) in placement.items():
            env = subprocess_env(TF_CONFIG=(configs / f"{task}.json").read_text())
            env.update(exact_bind_env(address.split(":")[0], [int(address.split(":")[1])], library, {}))
            argv = [sys.executable, str(SCRIPTS / "ps_train.py"), "plain", str(outdir)]
            processes[task] = lab.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        chief_output, _ = processes["chief-0"].communicate(timeout=300)
        assert processes["chief-0"].returncode == 0, chief_output[-4000:]
        start = time.monotonic()
        for task in ("worker-0", "worker-1", "ps-0"):  # they leave by themselves once the chief is gone
            output, _ = processes[task].communicate(timeout=60)
            assert processes[task].returncode == 0, output[-2000:]
        assert time.monotonic() - start < 60
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    result = json.loads((outdir / "chief.json").read_text())
    assert (result["kind"], result["num_workers"], result["num_ps"]) == ("parameter_server", 2, 1)
    assert result["loss"][-1] < 0.2 * result["loss"][0]
    assert all(device.startswith("/job:ps/replica:0/task:0") for device in result["embedding_devices"])
    assert json.loads((outdir / "exit-threads.json").read_text()) == []  # the coordinator stopped at exit
    assert all(set(lab.pids(host)) == {lab.sshd_pid(host)} for host in lab.hosts)  # only sshd is left


def test_a_server_is_reachable_on_its_own_address_only(lab):
    """With the bind shim, h3's server answers on its lab address but not on h3's loopback."""
    address, port = lab.address("h3"), 2300
    env = subprocess_env()
    env.update(exact_bind_env(address, [port], shim_library(), {}))
    code = ("import tensorflow as tf, time\n"
            f"tf.distribute.Server(tf.train.ClusterSpec({{'worker': ['{address}:{port}']}}),"
            " job_name='worker', task_index=0, protocol='grpc', start=True)\n"
            "time.sleep(60)\n")
    server = lab.popen("h3", [sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    try:
        seen = lab.run("h3", [sys.executable, "-c", PROBE, address, "127.0.0.1", str(port)], timeout=90)
        from_h1 = lab.run("h1", [sys.executable, "-c", PROBE, address, "-", str(port)], timeout=90)
    finally:
        server.kill()
        server.wait()
    assert seen.stdout.split() == ["True", "False"], seen.stderr  # its own address, not loopback
    assert from_h1.stdout.split()[0] == "True", from_h1.stderr  # and other hosts reach it
