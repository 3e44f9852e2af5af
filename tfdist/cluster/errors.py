"""The error types of :mod:`tfdist.cluster`: one :class:`Problem` per wrong field."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a cluster or TF_CONFIG: where, what, and how to fix it.

    >>> str(Problem("worker[1]", "'h:0' has port 0; ports are 1-65535", "use a port between 1 and 65535"))
    "worker[1]: 'h:0' has port 0; ports are 1-65535. Fix: use a port between 1 and 65535."
    """

    field: str
    message: str
    fix: str

    @property
    def detail(self) -> str:
        """The message and the fix, without the field (for callers that name the field)."""
        return f"{self.message}. Fix: {self.fix}."

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"


class ClusterConfigError(ValueError):
    """A cluster or TF_CONFIG is invalid; ``problems`` lists every reason."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems: list[Problem] = list(problems)
        if not self.problems:
            raise ValueError("ClusterConfigError needs at least one Problem")
        if len(self.problems) == 1:
            text = str(self.problems[0])
        else:
            text = f"{len(self.problems)} problems:\n" + "\n".join(f"  {p}" for p in self.problems)
        super().__init__(text)
