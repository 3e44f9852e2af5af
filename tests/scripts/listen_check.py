"""Run by tests/launch/test_bind.py under `tfdist launch`: servers listen, the chief reports where.

Non-chief tasks start a tf.distribute.Server (as make_strategy does) and sleep; the chief waits
until every task's port is listening, then prints one JSON line mapping port -> listen addresses
read from /proc/net/tcp and /proc/net/tcp6.
"""
import json
import os
import socket
import time

task = json.loads(os.environ["TF_CONFIG"])
cluster = task["cluster"]
if task["task"]["type"] != "chief":
    import tensorflow as tf

    tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=task["task"]["type"],
                         task_index=task["task"]["index"], protocol="grpc", start=True)
    time.sleep(600)
ports = {int(address.rsplit(":", 1)[1]) for addresses in cluster.values() for address in addresses
         if address != cluster["chief"][0]}


def listening() -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, port = local.split(":")
                if state == "0A" and int(port, 16) in ports:
                    raw = bytes.fromhex(address)
                    # /proc stores each 32-bit word in host (little-endian) order
                    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                    family = socket.AF_INET if width == 8 else socket.AF_INET6
                    found.setdefault(int(port, 16), []).append(socket.inet_ntop(family, raw))
    return found


deadline = time.time() + 60
while time.time() < deadline and set(listening()) != ports:
    time.sleep(0.5)
print("LISTEN " + json.dumps({str(port): addresses for port, addresses in sorted(listening().items())}), flush=True)
