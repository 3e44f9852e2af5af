"""The ``auto`` rule: a pure function of environment variables and the local GPU count.

| order | condition                                        | strategy               |
|-------|--------------------------------------------------|------------------------|
| 1     | horovodrun/mpirun variables (HOROVOD_RANK, ...)  | horovod                |
| 2     | TF_CONFIG whose cluster has ps tasks             | parameter_server       |
| 3     | TF_CONFIG with a cluster and no ps tasks         | multi_worker_mirrored  |
| 4     | more than one local GPU                          | mirrored               |
| 5     | otherwise                                        | single                 |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tfdist.environments import HorovodRunEnvironment, TFConfigEnvironment


@dataclass(frozen=True)
class Selection:
    """The strategy ``auto`` resolves to, and the rule that chose it (for logs and errors)."""

    kind: str
    reason: str


def select_strategy(environ: Mapping[str, str], gpu_count: int) -> Selection:
    """Apply the auto table to ``environ`` and ``gpu_count``; reads nothing else."""
    if HorovodRunEnvironment.detect(environ):
        env = HorovodRunEnvironment(environ)
        return Selection("horovod", f"{env.launcher} variables are set")
    if TFConfigEnvironment.detect(environ):
        env = TFConfigEnvironment(environ)
        try:
            has_ps = env.has_ps
        except ValueError:
            has_ps = False  # malformed TF_CONFIG: the backend reports it with the fix
        if has_ps:
            return Selection("parameter_server", "TF_CONFIG lists ps tasks")
        return Selection("multi_worker_mirrored", "TF_CONFIG lists a cluster without ps tasks")
    if gpu_count > 1:
        return Selection("mirrored", f"{gpu_count} local GPUs")
    return Selection("single", "no launcher variables, TF_CONFIG or multiple GPUs")
