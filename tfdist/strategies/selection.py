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

from typing import Mapping

from tfdist.environments import DETECTION_ORDER
from tfdist.environments.base import Selection

__all__ = ["Selection", "select_strategy"]


def select_strategy(environ: Mapping[str, str], gpu_count: int) -> Selection:
    """Apply the auto table to ``environ`` and ``gpu_count``; reads nothing else."""
    for environment in DETECTION_ORDER:
        if environment.detect(environ):
            selection = environment(environ).auto_strategy(gpu_count)
            if selection is not None:
                return selection
    raise AssertionError("LocalEnvironment always selects a strategy")  # pragma: no cover
