"""The fallback: one process on this machine, started by hand."""
from __future__ import annotations

from typing import Mapping

from tfdist.environments.base import ClusterEnvironment, Selection


class LocalEnvironment(ClusterEnvironment):
    """A single local process; always detected, so it goes last."""

    name = "local"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return True

    def auto_strategy(self, gpu_count: int) -> Selection:
        if gpu_count > 1:
            return Selection("mirrored", f"{gpu_count} local GPUs", self)
        return Selection("single", "no launcher variables, TF_CONFIG or multiple GPUs", self)
