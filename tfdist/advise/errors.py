"""The advisor's one error: a described cluster or workload it cannot model."""
from __future__ import annotations

from tfdist.errors import TfdistError


class AdviseError(TfdistError, ValueError):
    """A value the cost model cannot use; ``field`` names it (a dataclass field or an option), the
    message ends with the fix."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field
