"""Reading cluster files: YAML or JSON, as a task-type mapping or a full TF_CONFIG.

Accepted forms::

    # a cluster description (the evaluator may be listed)
    chief: ["node1:2222"]
    worker: ["node2:2222", "node3:2222"]
    ps: ["node3:2223"]
    evaluator: ["node1:2223"]

    # or a TF_CONFIG object; its "task" is ignored, its cluster must not list the evaluator
    {"cluster": {"worker": ["node2:2222"]}, "task": {"type": "worker", "index": 0}}

Any other top-level key (``rpc_layer``, a misspelt ``clustr``, a task list next to ``cluster``) is
reported, never dropped. Input is bounded (:mod:`tfdist.cluster.limits`); YAML anchors and aliases
and repeated keys are refused (:mod:`tfdist.cluster.parsing`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tfdist.cluster.errors import ClusterConfigError, Problem, field_name, shown
from tfdist.cluster.limits import MAX_INPUT_BYTES
from tfdist.cluster.parsing import parse_text
from tfdist.cluster.spec import TASK_TYPES, ClusterSpec

#: Keys a TF_CONFIG-form cluster file may have: "task" is ignored (each generated TF_CONFIG has its own).
FILE_TF_CONFIG_KEYS = ("cluster", "task")


def is_yaml_name(source: str) -> bool:
    """Files not ending in ``.json`` are read as YAML (a superset of JSON)."""
    return not source.endswith(".json")


def is_cluster_description(data: Any) -> bool:
    """Whether parsed data is the first accepted form: a non-empty mapping of task types only."""
    return isinstance(data, dict) and bool(data) and all(key in TASK_TYPES for key in data)


def load_cluster_data(text: str | bytes, source: str = "<text>") -> Any:
    """Parse JSON (files ending ``.json``) or YAML text; raise ClusterConfigError naming `source`."""
    return parse_text(text, source, yaml_syntax=is_yaml_name(source))


def cluster_from_data(data: Any, source: str = "<text>") -> ClusterSpec:
    """A ClusterSpec from a parsed cluster file (either accepted form)."""
    if isinstance(data, dict) and "cluster" in data:
        dropped = [Problem(field_name(source, key), f"key {shown(key)} is not used: a TF_CONFIG-form cluster "
                           "file gives only 'cluster' (and a 'task', which is ignored)",
                           f"remove {shown(key)}" + (" (tfdist writes no rpc_layer; TensorFlow uses grpc)"
                                                     if key == "rpc_layer" else ""))
                   for key in data if key not in FILE_TF_CONFIG_KEYS]
        try:
            spec = ClusterSpec.from_dict(data["cluster"], field="cluster", allow_evaluator=False)
        except ClusterConfigError as exc:
            raise ClusterConfigError(dropped + exc.problems) from None
        if dropped:
            raise ClusterConfigError(dropped)
        return spec
    if not isinstance(data, dict):
        raise ClusterConfigError([Problem(
            source, f"must hold a mapping of task types, got {type(data).__name__}",
            "write it as 'worker: [\"node1:2222\"]' (YAML) or a TF_CONFIG object")])
    return ClusterSpec.from_dict(data, field=source, allow_evaluator=True)


def read_bounded(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a file, reading at most MAX_INPUT_BYTES + 1; ClusterConfigError when unreadable or
    larger (a FIFO or /dev/zero ends too)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise ClusterConfigError([Problem(str(path), f"cannot be read: {exc.strerror or exc}",
                                          "check the path")]) from None
    return data  # decode() reports a size above the limit


def load_cluster_file(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read a cluster from a YAML or JSON file (see the module docstring for the forms)."""
    path = Path(path)
    return cluster_from_data(load_cluster_data(read_bounded(path), str(path)), str(path))
