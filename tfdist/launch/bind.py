"""Exact binding for TensorFlow's gRPC servers, through the LD_PRELOAD shim in bind_shim.c.

TensorFlow's servers listen on every interface whatever host the cluster spec names (checked:
``ss -ltn`` shows ``*:PORT`` for a server configured as ``127.0.0.1:PORT``), and TensorFlow has
no option to change that. ``exact_bind_env`` gives a task the variables that make the shim
rewrite that wildcard bind to the task's own address.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping

SHIM_SOURCE = Path(__file__).with_name("bind_shim.c")
BIND_ADDRESS = "TFDIST_BIND_ADDRESS"
BIND_PORTS = "TFDIST_BIND_PORTS"
LD_PRELOAD = "LD_PRELOAD"


class BindShimError(RuntimeError):
    """The shim cannot be built or cannot express the requested address."""


def shim_library(cache_dir: Path | None = None) -> Path:
    """The compiled shim, built once per source version into ``~/.cache/tfdist/bind``."""
    source = SHIM_SOURCE.read_bytes()
    cache_dir = cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tfdist" / "bind"
    library = cache_dir / f"libtfdist_bind-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if library.exists():
        return library
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise BindShimError("no C compiler to build the bind shim; fix: install gcc (`make setup` does), "
                            "or pass --bind-all to let servers listen on every interface")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
        built = Path(scratch) / library.name
        result = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(SHIM_SOURCE), "-ldl"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise BindShimError(f"building the bind shim failed: {result.stderr.strip()[-500:]}; fix: check "
                                "the C compiler, or pass --bind-all")
        os.replace(built, library)  # atomic: never a half-written library in the cache
    return library


def exact_bind_env(host: str, ports: list[int], library: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that make a task's servers listen on ``host`` only, for ``ports``.

    ``host`` must be an IPv4 address or ``localhost``; ``environ`` supplies any LD_PRELOAD to keep.
    """
    address = "127.0.0.1" if host == "localhost" else host
    try:
        if ipaddress.ip_address(address).version != 4:
            raise ValueError
    except ValueError:
        raise BindShimError(f"exact binding needs an IPv4 address, got host {host!r}; fix: name the "
                            "task by its IPv4 address, or pass --bind-all") from None
    preload = " ".join(p for p in (str(library), environ.get(LD_PRELOAD, "")) if p)
    return {LD_PRELOAD: preload, BIND_ADDRESS: address, BIND_PORTS: ",".join(map(str, ports))}
