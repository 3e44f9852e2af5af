"""TF_CONFIG as the tf.distribute backends read it: checked first, so a mistake gets a clear error
naming every problem instead of a gRPC failure or a hang."""
from __future__ import annotations

from typing import Any, Mapping

from tfdist.cluster import ClusterConfigError, ClusterSpec, TFConfig, validate_cluster
from tfdist.cluster.spec import CHIEF


def checked_tf_config(config: str | Mapping[str, Any]) -> TFConfig:
    """``config`` (JSON text or a mapping) as a ``TFConfig``; ``ClusterConfigError`` lists every problem."""
    return TFConfig.parse(config)


def checked_cluster(cluster: Mapping[str, list[str]], *, coordinator_outside: bool = False) -> None:
    """Raise ``ClusterConfigError`` listing every problem of a bare cluster (no task).

    ``coordinator_outside``: this process coordinates without being a task of the cluster
    (TensorFlow's in-process pattern), so the rules about the chief entry do not apply.
    """
    problems = validate_cluster(ClusterSpec.from_dict(dict(cluster)))
    if coordinator_outside:
        problems = [problem for problem in problems if problem.field != f"cluster.{CHIEF}"]
    if problems:
        raise ClusterConfigError(problems)
