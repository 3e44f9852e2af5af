"""Exact binding for TensorFlow's gRPC servers, through the LD_PRELOAD shim in bind_shim.c.

TensorFlow's servers listen on every interface whatever host the cluster spec names (checked:
``ss -ltn`` shows ``*:PORT`` for a server configured as ``127.0.0.1:PORT``), and TensorFlow has
no option to change that. ``exact_bind_env`` gives a task the variables that make the shim
rewrite that wildcard bind to the task's own address.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping

from tfdist.atomic_write import write_atomically
from tfdist.errors import TfdistError

SHIM_SOURCE = Path(__file__).with_name("bind_shim.c")
BIND_ADDRESS = "TFDIST_BIND_ADDRESS"
BIND_PORTS = "TFDIST_BIND_PORTS"
LD_PRELOAD = "LD_PRELOAD"


class BindShimError(TfdistError, RuntimeError):
    """The shim cannot be built or cannot express the requested address."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _verified(library: Path, source_hash: str) -> bool:
    """Whether ``library`` and the record beside it match: built from this source, unchanged since."""
    try:
        record = json.loads(library.with_name(library.name + ".sha256").read_text())
        return record == {"source": source_hash, "library": _sha256(library.read_bytes())}
    except (OSError, ValueError):
        return False


def shim_library(cache_dir: Path | None = None) -> Path:
    """The compiled shim, built once per source version into ``~/.cache/tfdist/bind``.

    Beside the library, ``<library>.sha256`` records the hash of the source it was built from and
    of the compiler's output. The cache may be shared or damaged, so a library is reused only
    when both match; otherwise it is rebuilt. Both files are written to a temporary name and
    renamed, so a reader never sees a half-written one. (The record catches a stale or damaged
    library, not someone who can write to the cache: keep the cache directory private.)
    """
    source = SHIM_SOURCE.read_bytes()
    source_hash = _sha256(source)
    cache_root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    cache_dir = cache_dir or cache_root / "tfdist" / "bind"
    library = cache_dir / f"libtfdist_bind-{source_hash[:12]}.so"
    if _verified(library, source_hash):
        return library
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise BindShimError("no C compiler to build the bind shim; fix: install gcc (`make setup` does), "
                            "or pass --bind-all to let servers listen on every interface")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
        built = Path(scratch) / library.name
        # compile the bytes that were hashed (stdin), not the file, which may have changed since
        result = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(built), "-x", "c", "-",
                                 "-x", "none", "-ldl"], input=source, capture_output=True)
        if result.returncode != 0:
            errors = result.stderr.decode(errors="replace").strip()[-500:]
            raise BindShimError(f"building the bind shim failed: {errors}; fix: check the C compiler, "
                                "or pass --bind-all")
        record = {"source": source_hash, "library": _sha256(built.read_bytes())}
        os.replace(built, library)  # atomic: never a half-written library in the cache
    write_atomically(library.with_name(library.name + ".sha256"), json.dumps(record).encode())
    return library


def exact_bind_env(host: str, ports: list[int], library: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that make a task's servers listen on ``host`` only, for ``ports``.

    ``host`` must be an IPv4 address or ``localhost``, ``ports`` one or more of 1-65535 (the shim
    refuses every wildcard bind when the list is malformed); ``environ`` supplies any LD_PRELOAD to
    keep.
    """
    if not ports or any(isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
                        for port in ports):
        raise BindShimError(f"exact binding needs ports from 1 to 65535, got {list(ports)!r}; fix: give the "
                            "ports the task's servers listen on, e.g. [2222]")
    address = "127.0.0.1" if host == "localhost" else host
    try:
        if ipaddress.ip_address(address).version != 4:
            raise ValueError
    except ValueError:
        raise BindShimError(f"exact binding needs an IPv4 address, got host {host!r}; fix: name the "
                            "task by its IPv4 address, or pass --bind-all") from None
    preload = " ".join(p for p in (str(library), environ.get(LD_PRELOAD, "")) if p)
    return {LD_PRELOAD: preload, BIND_ADDRESS: address, BIND_PORTS: ",".join(map(str, ports))}
