"""A parameter-server job across three hosts: network namespaces joined by a bridge.

Each host is a network namespace with its own address on a private bridge (198.18.0.0/24, the
range set aside for benchmarking; nothing leaves the machine). TF_CONFIGs come from
`tfdist tf-config --format dir`, every task runs the same script in its own namespace with its
server bound to its own address only, and the servers exit by themselves once the chief is done.
Needs root and iproute2 (CI has both); the namespaces are removed whatever happens.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from support import SCRIPTS, subprocess_env
from tfdist.launch.bind import exact_bind_env, shim_library

pytestmark = pytest.mark.cluster

PREFIX = f"tfd{os.getpid() % 100000}"
BRIDGE = f"{PREFIX}br"
HOSTS = {"h1": "198.18.0.11", "h2": "198.18.0.12", "h3": "198.18.0.13"}


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def hosts():
    if os.geteuid() != 0:
        pytest.fail("the multi-host test needs root to create network namespaces (CI runs as root)")
    created: list[str] = []
    try:
        ip("link", "add", BRIDGE, "type", "bridge")
        ip("link", "set", BRIDGE, "up")
        for name, address in HOSTS.items():
            namespace, veth = f"{PREFIX}{name}", f"{PREFIX}{name}v"
            ip("netns", "add", namespace)
            created.append(namespace)
            ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            ip("link", "set", veth, "master", BRIDGE)
            ip("link", "set", veth, "up")
            ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", namespace, "link", "set", "eth0", "up")
            ip("-n", namespace, "link", "set", "lo", "up")
        yield {name: f"{PREFIX}{name}" for name in HOSTS}
    finally:
        for namespace in created:
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
            for pid in pids.split():  # a task a failed test left behind
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


def test_parameter_server_job_across_three_hosts(hosts, tmp_path):
    configs = tmp_path / "tf_configs"
    chief, worker0, worker1, ps0 = (f"{HOSTS['h1']}:2222", f"{HOSTS['h2']}:2222", f"{HOSTS['h3']}:2222",
                                    f"{HOSTS['h3']}:2223")
    generated = subprocess.run([sys.executable, "-m", "tfdist", "tf-config", "--chief", chief, "--worker", worker0,
                                "--worker", worker1, "--ps", ps0, "--format", "dir", "--out", str(configs)],
                               capture_output=True, text=True, env=subprocess_env(), timeout=60)
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
            processes[task] = subprocess.Popen(
                ["ip", "netns", "exec", hosts[host], sys.executable, str(SCRIPTS / "ps_train.py"), "plain",
                 str(outdir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
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


def test_a_server_is_reachable_on_its_own_address_only(hosts, tmp_path):
    """With the bind shim, h3's server answers on 198.18.0.13 but not on h3's loopback."""
    address, port = HOSTS["h3"], 2300
    env = subprocess_env()
    env.update(exact_bind_env(address, [port], shim_library(), {}))
    code = ("import tensorflow as tf, time\n"
            f"tf.distribute.Server(tf.train.ClusterSpec({{'worker': ['{address}:{port}']}}), job_name='worker',"
            " task_index=0, protocol='grpc', start=True)\n"
            "time.sleep(60)\n")
    server = subprocess.Popen(["ip", "netns", "exec", hosts["h3"], sys.executable, "-c", code], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = ("import socket, sys, time\n"
             "def up(h):\n"
             "    try:\n"
             f"        socket.create_connection((h, {port}), timeout=1).close(); return True\n"
             "    except OSError:\n"
             "        return False\n"
             "deadline = time.time() + 60\n"
             f"while not up('{address}') and time.time() < deadline: time.sleep(0.5)\n"
             f"print(up('{address}'), up('127.0.0.1'))\n")
    try:
        seen = subprocess.run(["ip", "netns", "exec", hosts["h3"], sys.executable, "-c", probe],
                              capture_output=True, text=True, timeout=90).stdout.split()
        from_h1 = subprocess.run(["ip", "netns", "exec", hosts["h1"], sys.executable, "-c",
                                  probe.replace("up('127.0.0.1')", "True")],
                                 capture_output=True, text=True, timeout=90).stdout.split()
    finally:
        server.kill()
        server.wait()
    assert seen == ["True", "False"]  # its own address yes, loopback no: not listening on all interfaces
    assert from_h1[0] == "True"  # and other hosts reach it
