"""Renderers of TF_CONFIGs: JSON, shell ``export`` lines, one file per task.

Kubernetes manifests are :mod:`tfdist.cluster.k8s`.

All but :func:`write_dir` are pure and return strings.

>>> from tfdist.cluster.spec import Address, ClusterSpec
>>> from tfdist.cluster.tf_config import all_tf_configs
>>> print(render_env(all_tf_configs(ClusterSpec(worker=[Address("h", 1)]))), end="")
# worker:0
export TF_CONFIG='{"cluster":{"worker":["h:1"]},"task":{"type":"worker","index":0}}'
"""
from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfdist.cluster.tf_config import TF_CONFIG_ENV
from tfdist.errors import ArgumentValueError


def compact_json(obj: Any) -> str:
    """JSON with no spaces, as TF_CONFIG is usually written in environments."""
    return json.dumps(obj, separators=(",", ":"))


def render_json(configs: Mapping[str, Mapping[str, Any]], *, single: bool = False,
                indent: int | None = 2) -> str:
    """One JSON object ``{"type:index": TF_CONFIG}``; with `single`, the one TF_CONFIG itself."""
    if single:
        if len(configs) != 1:
            raise ArgumentValueError(f"single=True needs exactly one TF_CONFIG, got {len(configs)}; "
                                     "fix: select one task first (--task)")
        (obj,) = configs.values()
    else:
        obj = configs
    return json.dumps(obj, indent=indent) + "\n"


def render_env(configs: Mapping[str, Mapping[str, Any]]) -> str:
    """``# type:index`` and ``export TF_CONFIG='...'`` per task; a POSIX shell reads back the exact JSON."""
    return "".join(f"# {name}\nexport {TF_CONFIG_ENV}={shlex.quote(compact_json(config))}\n"
                   for name, config in configs.items())


def file_name(name: str) -> str:
    """``"worker:1"`` -> ``"worker-1.json"``."""
    return name.replace(":", "-") + ".json"


def write_dir(configs: Mapping[str, Mapping[str, Any]], directory: str | os.PathLike[str]) -> list[Path]:
    """Write one ``type-index.json`` per task into `directory` (created if needed), each atomically.

    Each file is written to a temporary file in the same directory, fsynced, then renamed over the
    target with ``os.replace``, so a crash never leaves a half-written TF_CONFIG.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, config in configs.items():
        target = root / file_name(name)
        _atomic_write(target, compact_json(config) + "\n")
        paths.append(target)
    _fsync_directory(root)
    return paths


def _atomic_write(target: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _fsync_directory(directory: Path) -> None:
    """Make the renames durable; not every platform can open a directory, so best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
