"""Reading cluster files: YAML or JSON, as a task-type mapping or a full TF_CONFIG.

Accepted forms::

    # a cluster description (the evaluator may be listed)
    chief: ["node1:2222"]
    worker: ["node2:2222", "node3:2222"]
    ps: ["node3:2223"]
    evaluator: ["node1:2223"]

    # or a TF_CONFIG object; its "task" is ignored, its cluster must not list the evaluator
    {"cluster": {"worker": ["node2:2222"]}, "task": {"type": "worker", "index": 0}}
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from tfdist.cluster.errors import ClusterConfigError, Problem
from tfdist.cluster.spec import ClusterSpec


def load_cluster_data(text: str, source: str = "<text>") -> Any:
    """Parse JSON (files ending ``.json``) or YAML text; raise ClusterConfigError naming `source`."""
    try:
        if source.endswith(".json"):
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        message = f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        message = f"is not valid YAML: {getattr(exc, 'problem', None) or exc}{where}"
    raise ClusterConfigError([Problem(source, message, "fix the file's syntax")])


def cluster_from_data(data: Any, source: str = "<text>") -> ClusterSpec:
    """A ClusterSpec from a parsed cluster file (either accepted form)."""
    if isinstance(data, dict) and "cluster" in data:
        return ClusterSpec.from_dict(data["cluster"], field="cluster", allow_evaluator=False)
    if not isinstance(data, dict):
        raise ClusterConfigError([Problem(
            source, f"must hold a mapping of task types, got {type(data).__name__}",
            "write it as 'worker: [\"node1:2222\"]' (YAML) or a TF_CONFIG object")])
    return ClusterSpec.from_dict(data, field=source, allow_evaluator=True)


def load_cluster_file(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read a cluster from a YAML or JSON file (see the module docstring for the forms)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterConfigError([Problem(str(path), f"cannot be read: {exc}", "check the path")]) from None
    return cluster_from_data(load_cluster_data(text, str(path)), str(path))
