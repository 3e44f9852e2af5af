"""The bind shim and its cache, without TensorFlow: plain sockets in a child Python."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from tfdist.launch.bind import BindShimError, exact_bind_env, shim_library

_BIND = ("import socket, sys\n"
         "for port in map(int, sys.argv[1:]):\n"
         "    s = socket.socket(); s.bind(('0.0.0.0', port)); print(s.getsockname()[0]); s.close()\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bound_addresses(library, ports_variable: str, *ports: int) -> subprocess.CompletedProcess:
    """Bind wildcard sockets to ``ports`` (0: an ephemeral port) under the shim: where they landed."""
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(library), "TFDIST_BIND_ADDRESS": "127.0.0.1",
           "TFDIST_BIND_PORTS": ports_variable}
    return subprocess.run([sys.executable, "-c", _BIND, *map(str, ports)], capture_output=True, text=True,
                          timeout=60, env=env)


def test_the_shim_rewrites_listed_wildcard_binds_only(tmp_path):
    library = shim_library(tmp_path)
    port = _free_port()
    result = _bound_addresses(library, f"1,{port}", port, 0)
    assert result.stdout.split() == ["127.0.0.1", "0.0.0.0"], result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("malformed", ["abc", "0", "", "2222,", "2222;2223", "70000", "2222,x"])
def test_a_malformed_port_list_fails_closed_and_says_why_once(tmp_path, malformed):
    """Read as port 0, "abc" used to move every ephemeral wildcard bind onto the address; leaving the
    binds alone instead would put the servers on every interface. Wildcard binds are refused."""
    result = _bound_addresses(shim_library(tmp_path), malformed, 0, 0)
    assert result.returncode != 0 and result.stdout == ""
    assert "PermissionError: [Errno 13]" in result.stderr
    assert result.stderr.count("tfdist bind shim: error: TFDIST_BIND_PORTS=") == 1, result.stderr
    assert "so every bind to all interfaces is refused (EACCES)" in result.stderr
    assert "; fix: " in result.stderr
    bound = subprocess.run([sys.executable, "-c", "import socket; s = socket.socket(); "
                            "s.bind(('127.0.0.1', 0)); print(s.getsockname()[0])"], capture_output=True, text=True,
                           timeout=60, env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(shim_library(tmp_path)),
                                            "TFDIST_BIND_ADDRESS": "127.0.0.1", "TFDIST_BIND_PORTS": malformed})
    assert bound.stdout.split() == ["127.0.0.1"], bound.stderr  # a bind to one address is not touched


@pytest.mark.parametrize("ports", [[0], [70000], [], ["2222"], [True]])
def test_exact_bind_env_refuses_ports_the_shim_would_not_read(tmp_path, ports):
    with pytest.raises(BindShimError, match=r"exact binding needs ports from 1 to 65535, got .*; fix: "):
        exact_bind_env("127.0.0.1", ports, tmp_path / "lib.so", {})


def test_the_cached_library_is_verified_and_rebuilt_when_damaged(tmp_path):
    library = shim_library(tmp_path)
    record = library.with_name(library.name + ".sha256")
    good = library.read_bytes()
    assert good.startswith(b"\x7fELF")
    assert set(json.loads(record.read_text())) == {"source", "library"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([library.name, record.name])  # no temp files

    library.write_bytes(b"not a library")  # damaged, or replaced by another version in a shared cache
    assert shim_library(tmp_path) == library
    assert library.read_bytes().startswith(b"\x7fELF")

    record.unlink()  # a library nobody vouches for
    library.write_bytes(b"junk")
    assert shim_library(tmp_path) == library
    assert library.read_bytes().startswith(b"\x7fELF") and record.exists()

    record.write_text(json.dumps({"source": "0" * 64, "library": json.loads(record.read_text())["library"]}))
    library.write_bytes(b"junk")  # a record for another source does not vouch for it either
    assert shim_library(tmp_path).read_bytes().startswith(b"\x7fELF")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([library.name, record.name])


def test_a_verified_library_is_reused_as_is(tmp_path):
    library = shim_library(tmp_path)
    before = library.stat()
    assert shim_library(tmp_path) == library
    assert library.stat().st_ino == before.st_ino and library.stat().st_mtime_ns == before.st_mtime_ns
