"""Detect a tf.distribute cluster member from the ``TF_CONFIG`` environment variable."""
from __future__ import annotations

from typing import Mapping

from tfdist.cluster import ClusterConfigError, TFConfig
from tfdist.environments.base import ClusterEnvironment, Selection


class TFConfigEnvironment(ClusterEnvironment):
    """A task of a multi-process tf.distribute cluster described by TF_CONFIG (parsed once, as
    ``tfdist.cluster.TFConfig``; a malformed one raises ``ClusterConfigError`` with every problem)."""

    name = "tf_config"

    def __init__(self, environ: Mapping[str, str]) -> None:
        super().__init__(environ)
        self._config: TFConfig | None = None

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        """TF_CONFIG is set; a malformed one counts too, so the backend reports its problems."""
        try:
            config = TFConfig.from_environ(environ)
        except ClusterConfigError:
            return True
        return config is not None and bool(config.cluster)

    @property
    def config(self) -> TFConfig:
        if self._config is None:
            parsed = TFConfig.from_environ(self._environ)
            no_cluster = TFConfig(cluster={}, task_type=None, task_index=0)
            self._config = parsed if parsed is not None else no_cluster
        return self._config

    def auto_strategy(self, gpu_count: int) -> Selection:
        try:
            has_ps = self.config.has_ps
        except ClusterConfigError:
            has_ps = False  # malformed TF_CONFIG: the backend reports it with the fix
        if has_ps:
            return Selection("parameter_server", "TF_CONFIG lists ps tasks")
        return Selection("multi_worker_mirrored", "TF_CONFIG lists a cluster without ps tasks")

    @property
    def cluster(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.config.cluster.items()}

    @property
    def task_type(self) -> str | None:
        return self.config.task_type

    @property
    def task_index(self) -> int:
        return self.config.task_index

    @property
    def has_ps(self) -> bool:
        return self.config.has_ps

    @property
    def is_chief(self) -> bool:
        """The chief task, or worker 0 when the cluster has no chief (also True without TF_CONFIG)."""
        return self.config.is_chief

    @property
    def rank(self) -> int:
        """Chief is rank 0; worker i is i (+1 when a chief exists); others report their index."""
        return self.config.rank

    @property
    def size(self) -> int:
        """The number of training tasks (chief + workers)."""
        return self.config.num_training_tasks

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "task_type": self.task_type, "task_index": self.task_index,
                "cluster": {k: len(v) for k, v in self.cluster.items()}}
