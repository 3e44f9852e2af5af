"""Detect a tf.distribute cluster member from the ``TF_CONFIG`` environment variable.

This is the one place a run reads TF_CONFIG: ``make_strategy`` detects the environment once and hands
it to the backend it builds, and the tf.distribute backends ask it which task this process is.
"""
from __future__ import annotations

from typing import Mapping

from tfdist.cluster import ClusterConfigError, TFConfig
from tfdist.cluster.spec import CHIEF
from tfdist.environments.base import ClusterEnvironment, Selection

_NOT_READ = object()
#: What a process without TF_CONFIG is: a cluster of its own, worker 0.
_NO_CLUSTER = TFConfig(cluster={}, task_type=None, task_index=0)


class TFConfigEnvironment(ClusterEnvironment):
    """A task of a multi-process tf.distribute cluster described by TF_CONFIG (parsed once, as
    ``tfdist.cluster.TFConfig``; a malformed one raises ``ClusterConfigError`` with every problem).

    ``config``: the cluster and task given in code instead (``make_strategy('parameter_server',
    cluster=..., task_type=...)``), already checked; TF_CONFIG is then not read.
    """

    name = "tf_config"

    def __init__(self, environ: Mapping[str, str], config: TFConfig | None = None) -> None:
        super().__init__(environ)
        self._tf_config: object = _NOT_READ if config is None else config

    @classmethod
    def of(cls, environment: ClusterEnvironment) -> TFConfigEnvironment:
        """``environment`` when it is a TF_CONFIG one, else the TF_CONFIG of the same variables (a
        backend of TF_CONFIG's asked for by name where another launcher was detected first)."""
        return environment if isinstance(environment, cls) else cls(environment.environ)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        """TF_CONFIG is set; a malformed one counts too, so the backend reports its problems."""
        return TFConfigEnvironment(environ).applies()

    def applies(self) -> bool:
        """TF_CONFIG names a cluster (a malformed one counts: reading it raises with the fix)."""
        try:
            return bool(self.config.cluster)
        except ClusterConfigError:
            return True

    @property
    def tf_config(self) -> TFConfig | None:
        """The checked TF_CONFIG (or the config given in code); ``None`` when TF_CONFIG is unset or blank."""
        if self._tf_config is _NOT_READ:
            self._tf_config = TFConfig.from_environ(self._environ)
        return self._tf_config  # type: ignore[return-value]

    @property
    def config(self) -> TFConfig:
        """As ``tf_config``, with a process without TF_CONFIG a cluster of its own (worker 0)."""
        parsed = self.tf_config
        return parsed if parsed is not None else _NO_CLUSTER

    def auto_strategy(self, gpu_count: int) -> Selection:
        try:
            has_ps = self.config.has_ps
        except ClusterConfigError:
            has_ps = False  # malformed TF_CONFIG: the backend reports it with the fix
        if has_ps:
            return Selection("parameter_server", "TF_CONFIG lists ps tasks", self)
        return Selection("multi_worker_mirrored", "TF_CONFIG lists a cluster without ps tasks", self)

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
        """The chief task, or worker 0 when the cluster has no chief (also True without TF_CONFIG);
        a config given in code whose task is the chief outside its cluster (TensorFlow's in-process
        coordinator) is the chief too."""
        return self.task_type == CHIEF or self.config.is_chief

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
