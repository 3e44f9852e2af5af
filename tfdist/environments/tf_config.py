"""Detect a tf.distribute cluster member from the ``TF_CONFIG`` environment variable."""
from __future__ import annotations

import json
from typing import Any, Mapping

from tfdist.cluster.tf_config import TF_CONFIG_ENV as TF_CONFIG
from tfdist.environments.base import ClusterEnvironment


def parse_tf_config(raw: str | None) -> dict[str, Any]:
    """Parse TF_CONFIG text into a dict; ``{}`` when unset or blank.

    Raises ``ValueError`` naming the variable when the text is not a JSON object.
    """
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{TF_CONFIG} is not valid JSON ({exc.msg} at character {exc.pos}); "
                         "fix: generate it with `tfdist tf-config` or check it with "
                         "`tfdist tf-config validate`") from None
    if not isinstance(value, dict):
        raise ValueError(f"{TF_CONFIG} must be a JSON object with 'cluster' and 'task', "
                         f"got {type(value).__name__}; fix: generate it with `tfdist tf-config`")
    return value


class TFConfigEnvironment(ClusterEnvironment):
    """A task of a multi-process tf.distribute cluster described by TF_CONFIG."""

    name = "tf_config"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        try:
            cluster = parse_tf_config(environ.get(TF_CONFIG)).get("cluster")
        except ValueError:
            return bool(environ.get(TF_CONFIG, "").strip())  # malformed: let the backend explain
        return isinstance(cluster, dict) and bool(cluster)

    @property
    def config(self) -> dict[str, Any]:
        return parse_tf_config(self._environ.get(TF_CONFIG))

    @property
    def cluster(self) -> dict[str, list[str]]:
        cluster = self.config.get("cluster") or {}
        return {str(k): list(v) for k, v in cluster.items()} if isinstance(cluster, dict) else {}

    @property
    def task_type(self) -> str | None:
        task = self.config.get("task") or {}
        return task.get("type") if isinstance(task, dict) else None

    @property
    def task_index(self) -> int:
        task = self.config.get("task") or {}
        return int(task.get("index", 0)) if isinstance(task, dict) else 0

    @property
    def has_ps(self) -> bool:
        return bool(self.cluster.get("ps"))

    @property
    def is_chief(self) -> bool:
        """The chief task, or worker 0 when the cluster has no chief (also True without TF_CONFIG)."""
        if self.cluster.get("chief"):
            return self.task_type == "chief"
        return self.task_type in (None, "worker") and self.task_index == 0

    @property
    def rank(self) -> int:
        """Chief is rank 0; worker i is i (+1 when a chief exists); others report their index."""
        if self.task_type == "worker" and self.cluster.get("chief"):
            return self.task_index + 1
        return self.task_index

    @property
    def size(self) -> int:
        """The number of training tasks (chief + workers)."""
        return len(self.cluster.get("chief", [])) + len(self.cluster.get("worker", []))

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "task_type": self.task_type, "task_index": self.task_index,
                "cluster": {k: len(v) for k, v in self.cluster.items()}}
