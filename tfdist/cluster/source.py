"""Checking one TF_CONFIG or cluster source: what ``tfdist tf-config validate`` reports.

Pure: :func:`check_source` takes the text already read (from ``$TF_CONFIG``, stdin or a file) and
returns a frozen :class:`SourceCheck` holding every problem, or the cluster and its one-line verdict.
A file may also be a cluster description (``{chief: [...], worker: [...]}``, YAML unless it ends in
``.json``); ``$TF_CONFIG`` and stdin are always read as a TF_CONFIG.

>>> check = check_source('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}', "stdin")
>>> check.valid, check.verdict
(True, 'TF_CONFIG is valid: task worker:0 of a cluster with 1 worker')
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tfdist.cluster.errors import ClusterConfigError, Problem
from tfdist.cluster.files import cluster_from_data, is_cluster_description, is_yaml_name
from tfdist.cluster.parsing import parse_json, parse_yaml
from tfdist.cluster.spec import ClusterSpec
from tfdist.cluster.tf_config import TF_CONFIG_ENV, TFConfig
from tfdist.cluster.validate import validate_cluster, warnings_for


@dataclass(frozen=True)
class SourceCheck:
    """What one source holds: ``problems`` (empty when valid), else its ``spec`` and, for a TF_CONFIG,
    its ``config`` (None for a cluster description)."""

    problems: tuple[Problem, ...] = ()
    spec: ClusterSpec | None = None
    config: TFConfig | None = None

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def verdict(self) -> str:
        """The line printed for a valid source (empty when invalid)."""
        if self.spec is None:
            return ""
        if self.config is None:
            return f"cluster is valid: {self.spec.summary()}"
        return (f"TF_CONFIG is valid: task {self.config.task_type}:{self.config.task_index} of a cluster with "
                f"{self.spec.summary()}")

    def warnings(self) -> list[str]:
        """The valid cluster's warnings (:func:`tfdist.cluster.validate.warnings_for`)."""
        return warnings_for(self.spec) if self.spec is not None else []


def check_source(raw: str | bytes, where: str, from_file: bool = False) -> SourceCheck:
    """Check a TF_CONFIG read from `where` (``$TF_CONFIG``, ``stdin`` or, with `from_file`, a file
    path, which may also hold a cluster description); every problem names `where` or a field."""
    if from_file and is_yaml_name(where):
        try:
            data: Any = parse_yaml(raw, where)
        except ClusterConfigError as exc:
            return SourceCheck(tuple(exc.problems))
        if not isinstance(data, dict):  # a YAML scalar or list: let the TF_CONFIG check name its type
            data = json.dumps(data, default=str)
    elif from_file:
        try:
            data = parse_json(raw, TF_CONFIG_ENV)
        except ClusterConfigError:
            data = raw  # TFConfig.parse below reports why
    else:
        data = raw  # $TF_CONFIG and stdin are always a TF_CONFIG, never a cluster description
    if from_file and is_cluster_description(data):
        return _check_cluster_description(data, where)
    try:
        config = TFConfig.parse(data)
    except ClusterConfigError as exc:
        return SourceCheck(tuple(exc.problems))
    spec = ClusterSpec.from_dict(dict(config.cluster), allow_evaluator=False)
    return SourceCheck(spec=spec, config=config)


def _check_cluster_description(data: dict[str, Any], where: str) -> SourceCheck:
    """A cluster description ({chief: [...], worker: [...], ...}) rather than a TF_CONFIG."""
    try:
        spec = cluster_from_data(data, where)
    except ClusterConfigError as exc:
        return SourceCheck(tuple(exc.problems))
    problems = validate_cluster(spec)
    if problems:
        return SourceCheck(tuple(problems))
    return SourceCheck(spec=spec)
