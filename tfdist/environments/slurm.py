"""Detect a task of a SLURM job step (``srun``)."""
from __future__ import annotations

from typing import Mapping

from tfdist.environments.base import ClusterEnvironment, Selection, int_variable
from tfdist.errors import TfdistError, with_fix


class SlurmWithoutClusterError(TfdistError, RuntimeError):
    """A SLURM step of several tasks with nothing that tells them how to train together."""

SLURM_NTASKS = "SLURM_NTASKS"
SLURM_PROCID = "SLURM_PROCID"
SLURM_LOCALID = "SLURM_LOCALID"
SLURM_JOB_NAME = "SLURM_JOB_NAME"
SLURM_STEP_NUM_TASKS = "SLURM_STEP_NUM_TASKS"  # set by srun for its step only, not by sbatch


class SlurmEnvironment(ClusterEnvironment):
    """A task started by ``srun``; an interactive ``salloc`` shell (job name bash) is not one."""

    name = "slurm"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return (SLURM_NTASKS in environ and SLURM_PROCID in environ
                and environ.get(SLURM_JOB_NAME) not in ("bash", "interactive"))

    def auto_strategy(self, gpu_count: int) -> Selection | None:
        """One task: ask the next detector. Several tasks without TF_CONFIG or Horovod variables
        would each train alone on all the data, so ``auto`` refuses instead of guessing."""
        step_tasks = self._environ.get(SLURM_STEP_NUM_TASKS)
        if step_tasks is None or int_variable(self._environ, SLURM_STEP_NUM_TASKS) <= 1:
            return None  # an sbatch script (no srun step) or a one-task step runs one process
        raise SlurmWithoutClusterError(with_fix(
            f"this is task {self.rank} of a SLURM step of {step_tasks} tasks, but neither TF_CONFIG nor "
            "Horovod's variables say how they train together, so each would train alone",
            "export TF_CONFIG in every task before python (`srun bash -c 'export TF_CONFIG=\"$(tfdist "
            "tf-config --format slurm --ps-count 1 --with-chief)\"; python train.py'`), or start the step "
            "with horovodrun / `srun --mpi=pmi2` (Horovod)"))

    @property
    def rank(self) -> int:
        return int_variable(self._environ, SLURM_PROCID)

    @property
    def size(self) -> int:
        return int_variable(self._environ, SLURM_NTASKS)

    @property
    def local_rank(self) -> int:
        return int_variable(self._environ, SLURM_LOCALID, default=0)
