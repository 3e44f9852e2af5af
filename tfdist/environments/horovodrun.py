"""Detect a process started by ``horovodrun`` (Gloo) or ``mpirun`` (MPI)."""
from __future__ import annotations

from typing import Mapping

from tfdist.cluster.tf_config import TF_CONFIG_ENV
from tfdist.environments.base import ClusterEnvironment, Selection, int_variable

# horovodrun --gloo exports these to every rank.
HOROVOD_RANK = "HOROVOD_RANK"
HOROVOD_SIZE = "HOROVOD_SIZE"
HOROVOD_LOCAL_RANK = "HOROVOD_LOCAL_RANK"
# mpirun (Open MPI) and MPICH/Intel MPI (PMI) export these.
OMPI_RANK, OMPI_SIZE, OMPI_LOCAL_RANK = (
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")
PMI_RANK, PMI_SIZE = "PMI_RANK", "PMI_SIZE"

_RANK_SIZE_LOCAL = (
    (HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK),
    (OMPI_RANK, OMPI_SIZE, OMPI_LOCAL_RANK),
    (PMI_RANK, PMI_SIZE, None),
)


class HorovodRunEnvironment(ClusterEnvironment):
    """A rank of a Horovod job: ``horovodrun`` (HOROVOD_RANK) or ``mpirun`` (OMPI_/PMI_ variables).

    PMI_RANK/PMI_SIZE alone count only without TF_CONFIG: ``srun --mpi=pmi2`` and Intel MPI set
    them for jobs that are not Horovod jobs, such as a SLURM step that exports TF_CONFIG.
    """

    name = "horovodrun"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        for rank, size, _ in _RANK_SIZE_LOCAL:
            if rank in environ and size in environ:
                return rank != PMI_RANK or not environ.get(TF_CONFIG_ENV, "").strip()
        return False

    def _variables(self) -> tuple[str, str, str | None]:
        for rank, size, local in _RANK_SIZE_LOCAL:
            if rank in self._environ and size in self._environ:
                return rank, size, local
        return HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK

    def auto_strategy(self, gpu_count: int) -> Selection:
        return Selection("horovod", f"{self.launcher} variables are set", self)

    @property
    def launcher(self) -> str:
        """``horovodrun`` or ``mpirun``: which variables identified the job."""
        return "horovodrun" if self._variables()[0] == HOROVOD_RANK else "mpirun"

    @property
    def rank(self) -> int:
        return int_variable(self._environ, self._variables()[0])

    @property
    def size(self) -> int:
        return int_variable(self._environ, self._variables()[1])

    @property
    def local_rank(self) -> int:
        local = self._variables()[2]
        return int_variable(self._environ, local, default=0) if local else 0

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "launcher": self.launcher}
