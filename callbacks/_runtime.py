"""What the callbacks need to know about the running job: asked of the strategy, never re-derived.

The strategy ``tfdist.make_strategy`` built is the one source of who is chief and how many replicas
step together. Callbacks used without it (a hand-written Horovod or tf.distribute script) ask
Horovod, once it is initialised, or the model's tf.distribute strategy; they read no environment
variables.
"""
from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from tfdist.cluster import TFConfig
from tfdist.runtime.state import current_strategy


def horovod() -> ModuleType | None:
    """``horovod.tensorflow`` when it was imported and initialised in this process, else ``None``."""
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None or not hvd.is_initialized():
        return None
    return hvd


def replicas(model: Any = None) -> int:
    """Replicas that step together: the strategy's, else Horovod's size, else the model's
    tf.distribute replicas, else 1."""
    strategy = current_strategy()
    if strategy is not None:
        return strategy.num_replicas_in_sync
    hvd = horovod()
    if hvd is not None:
        return hvd.size()
    tf_strategy = getattr(model, "distribute_strategy", None)
    return int(getattr(tf_strategy, "num_replicas_in_sync", 1) or 1)


def workers(model: Any = None) -> int:
    """Processes that run training steps: the strategy's, else Horovod's size, else the replicas."""
    strategy = current_strategy()
    if strategy is not None:
        return strategy.num_workers
    hvd = horovod()
    return hvd.size() if hvd is not None else replicas(model)


def is_chief(model: Any = None) -> bool:
    """The strategy's chief; else Horovod's rank 0; else the chief of the model's tf.distribute
    cluster (the chief task, or worker 0 without one); else True."""
    strategy = current_strategy()
    if strategy is not None:
        return strategy.is_chief
    hvd = horovod()
    if hvd is not None:
        return hvd.rank() == 0
    config = _cluster_of(model)
    return True if config is None else config.is_chief


def workers_beside_chief(model: Any = None) -> frozenset[int]:
    """The workers on the chief's host (:attr:`tfdist.cluster.TFConfig.workers_beside_chief`): of the
    strategy's TF_CONFIG, else of the model's tf.distribute cluster (a ParameterServerStrategy keeps
    no resolver there); none without one."""
    config = getattr(getattr(current_strategy(), "environment", None), "config", None)
    if not isinstance(config, TFConfig):
        config = _cluster_of(model)
    return frozenset() if config is None else config.workers_beside_chief


def _cluster_of(model: Any) -> TFConfig | None:
    """The model's tf.distribute cluster as its strategy's resolver gives it; None without one."""
    resolver = getattr(getattr(model, "distribute_strategy", None), "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not cluster:
        return None
    return TFConfig(cluster={k: tuple(v) for k, v in cluster.items()}, task_type=resolver.task_type,
                    task_index=int(resolver.task_id or 0))
