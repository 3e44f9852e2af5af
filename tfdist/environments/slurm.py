"""Detect a task of a SLURM job step (``srun``)."""
from __future__ import annotations

from typing import Mapping

from tfdist.environments.base import ClusterEnvironment, int_variable

SLURM_NTASKS = "SLURM_NTASKS"
SLURM_PROCID = "SLURM_PROCID"
SLURM_LOCALID = "SLURM_LOCALID"
SLURM_JOB_NAME = "SLURM_JOB_NAME"


class SlurmEnvironment(ClusterEnvironment):
    """A task started by ``srun``; an interactive ``salloc`` shell (job name bash) is not one."""

    name = "slurm"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return (SLURM_NTASKS in environ and SLURM_PROCID in environ
                and environ.get(SLURM_JOB_NAME) not in ("bash", "interactive"))

    @property
    def rank(self) -> int:
        return int_variable(self._environ, SLURM_PROCID)

    @property
    def size(self) -> int:
        return int_variable(self._environ, SLURM_NTASKS)

    @property
    def local_rank(self) -> int:
        return int_variable(self._environ, SLURM_LOCALID, default=0)
