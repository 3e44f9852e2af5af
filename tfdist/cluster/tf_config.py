"""TF_CONFIG for each task of a cluster: fresh plain dicts, inputs never mutated.

>>> from tfdist.cluster.spec import Address, ClusterSpec
>>> spec = ClusterSpec(worker=[Address("h1", 2222), Address("h2", 2222)])
>>> tf_config_for(spec, "worker", 1)
{'cluster': {'worker': ['h1:2222', 'h2:2222']}, 'task': {'type': 'worker', 'index': 1}}
"""
from __future__ import annotations

import re
from typing import Any

from tfdist.cluster.errors import ClusterConfigError, Problem
from tfdist.cluster.spec import TASK_TYPES, ClusterSpec

#: Environment variable read by tf.distribute.cluster_resolver.TFConfigClusterResolver.
TF_CONFIG_ENV = "TF_CONFIG"
#: gRPC setting every task of a fault-tolerant ParameterServerStrategy cluster needs ("use_caller").
GRPC_FAIL_FAST_ENV = "GRPC_FAIL_FAST"
_TASK_FIX = "write the task as TYPE:INDEX, e.g. 'worker:1', with TYPE one of " + ", ".join(TASK_TYPES)


def task_name(task_type: str, index: int) -> str:
    """The ``"type:index"`` key used by :func:`all_tf_configs` and the CLI's ``--task``."""
    return f"{task_type}:{index}"


def parse_task(text: str, field: str = "task") -> tuple[str, int]:
    """Parse ``"worker:1"`` into ``("worker", 1)``; raise ClusterConfigError naming `field`.

    >>> parse_task("ps:0")
    ('ps', 0)
    """
    if not isinstance(text, str) or text.count(":") != 1:
        raise ClusterConfigError([Problem(field, f"{text!r} is not TYPE:INDEX", _TASK_FIX)])
    task_type, index = text.split(":")
    problems = []
    if task_type not in TASK_TYPES:
        problems.append(Problem(field, f"{text!r} has unknown task type {task_type!r}", _TASK_FIX))
    if not re.fullmatch(r"[0-9]+", index):
        problems.append(Problem(field, f"{text!r} has index {index!r}, which is not a whole number >= 0",
                                _TASK_FIX))
    if problems:
        raise ClusterConfigError(problems)
    return task_type, int(index)


def tf_config_for(spec: ClusterSpec, task_type: str, index: int) -> dict[str, Any]:
    """The TF_CONFIG of one task; raises ClusterConfigError when the task is not in `spec`."""
    spec.address_of(task_type, index)  # raises for a task that is not in the cluster
    return {"cluster": spec.training_cluster(), "task": {"type": task_type, "index": index}}


def all_tf_configs(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    """TF_CONFIG of every task, keyed ``"type:index"`` in the order chief, worker, ps, evaluator."""
    return {task_name(t, i): tf_config_for(spec, t, i) for t, i in spec.tasks()}
