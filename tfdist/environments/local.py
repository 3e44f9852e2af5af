"""The fallback: one process on this machine, started by hand."""
from __future__ import annotations

from typing import Mapping

from tfdist.environments.base import ClusterEnvironment


class LocalEnvironment(ClusterEnvironment):
    """A single local process; always detected, so it goes last."""

    name = "local"

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        return True
