"""`tfdist launch` keeps TensorFlow's gRPC servers on 127.0.0.1 unless --bind-all (real servers)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import SCRIPTS, subprocess_env
from tfdist.launch.bind import BindShimError, exact_bind_env

pytestmark = pytest.mark.cluster


def _listen_addresses(*options: str) -> tuple[dict[str, list[str]], str]:
    result = subprocess.run([sys.executable, "-m", "tfdist", "launch", "--workers", "1", "--ps", "1", *options,
                             "--grace", "1", "--", sys.executable, str(SCRIPTS / "listen_check.py")],
                            capture_output=True, text=True, timeout=120, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if "LISTEN " in line)
    return json.loads(line.split("LISTEN ", 1)[1]), result.stderr


def test_servers_listen_on_the_cluster_address_only():
    addresses, _ = _listen_addresses()
    assert len(addresses) == 2  # worker:0 and ps:0
    for port, listening in addresses.items():
        assert listening == ["::ffff:127.0.0.1"] or listening == ["127.0.0.1"], (port, listening)


def test_bind_all_listens_everywhere_and_warns():
    addresses, stderr = _listen_addresses("--bind-all")
    assert all(listening == ["::"] for listening in addresses.values()), addresses
    assert "the gRPC runtime has no authentication" in stderr


def test_exact_bind_env_keeps_an_existing_preload_and_refuses_names(tmp_path):
    env = exact_bind_env("localhost", [2222], tmp_path / "lib.so", {"LD_PRELOAD": "/other.so"})
    assert env == {"LD_PRELOAD": f"{tmp_path / 'lib.so'} /other.so", "TFDIST_BIND_ADDRESS": "127.0.0.1",
                   "TFDIST_BIND_PORTS": "2222"}
    with pytest.raises(BindShimError, match="needs an IPv4 address, got host 'node1'"):
        exact_bind_env("node1", [2222], tmp_path / "lib.so", {})
