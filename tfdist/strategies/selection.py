"""The ``auto`` rule: a pure function of environment variables and the local GPU count.

The detectors of ``tfdist.environments.DETECTION_ORDER`` are asked in order; the first that names
a strategy wins (docs/strategies.md, "The `auto` table"):

| order | detector   | condition                                              | strategy              |
|-------|------------|--------------------------------------------------------|-----------------------|
| 1     | horovodrun | horovodrun/mpirun variables (HOROVOD_RANK, ...)        | horovod               |
| 2     | tf_config  | TF_CONFIG whose cluster has ps tasks                   | parameter_server      |
|       |            | TF_CONFIG with a cluster and no ps tasks               | multi_worker_mirrored |
| 3     | slurm      | a SLURM step of several tasks without the above        | error: says the fix   |
| 4     | local      | more than one local GPU                                | mirrored              |
|       |            | otherwise                                              | single                |
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from tfdist.environments import DETECTION_ORDER, ClusterEnvironment
from tfdist.environments.base import Selection

__all__ = ["Selection", "select_strategy"]


def select_strategy(environ: Mapping[str, str], gpu_count: int) -> Selection:
    """Apply the auto table to ``environ`` and ``gpu_count``; reads nothing else. The selection
    carries the environment detected (``selection.environment``: the first detector that applies,
    as ``detect_environment`` finds it; a one-task SLURM step stays a SLURM one), for the backend."""
    detected: ClusterEnvironment | None = None
    for environment_type in DETECTION_ORDER:
        environment = environment_type(environ)
        if environment.applies():
            detected = detected or environment
            selection = environment.auto_strategy(gpu_count)
            if selection is not None:
                return dataclasses.replace(selection, environment=detected)
    raise AssertionError("LocalEnvironment always selects a strategy")  # pragma: no cover
