"""The adaptive run's one error, and the check of a measured or given number."""
from __future__ import annotations

import math

from tfdist.errors import TfdistError, with_fix


class AdaptError(TfdistError, ValueError):
    """A measurement or a decision input that cannot be used; ``field`` names it (e.g.
    ``workers[1].compute_ms``), the message ends with the fix."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_number(value: object, field: str, fix: str, *, positive: bool = False) -> float:
    """``value`` as a float if it is a finite number ``>= 0`` (``> 0`` when ``positive``), else an
    :class:`AdaptError` naming ``field`` and ending with ``fix``."""
    kind = "a positive" if positive else "a non-negative"
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < 0 or (positive and value == 0)):
        raise AdaptError(with_fix(f"`{field}` must be {kind} finite number, got {value!r}", fix), field)
    return float(value)


def check_whole(value: object, field: str, fix: str, *, minimum: int = 0) -> int:
    """``value`` if it is a whole number ``>= minimum`` (not a bool), else an :class:`AdaptError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise AdaptError(with_fix(f"`{field}` must be a whole number >= {minimum}, got {value!r}", fix), field)
    return value
