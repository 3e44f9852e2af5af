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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfdist.atomic_write import write_atomically
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

    Each file is written whole or not at all (:func:`tfdist.atomic_write.write_atomically`), so a crash
    never leaves a half-written TF_CONFIG.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, config in configs.items():
        target = root / file_name(name)
        write_atomically(target, compact_json(config) + "\n")
        paths.append(target)
    return paths
