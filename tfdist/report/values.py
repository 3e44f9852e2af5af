"""Which numbers of an event file the report uses: a value a training run can log, or a note.

    usable_value(1e308)          # False: no run logs 1e308 examples/s, seconds or MB
    usable_value(math.nan)       # True: the callbacks write NaN for "not measured" or "never reached"
    shown(math.inf)              # "inf", for the note that names a value left out

An event file can hold any float64 (and any int64 step). Matplotlib cannot lay out an axis that
spans beyond float64 (``arange: cannot compute length``), a mean of two 1e308 overflows and a rate
of 0 divides, so the report reads a point only when its value is NaN or finite within ``LARGEST``,
its wall time finite within ``LARGEST_WALL_TIME`` and its step within ``LARGEST``; the other points
are left out and named, with their file, tag, step and value, as the file's problem (stderr and the
page). NaN values are kept and shown in the tables, never drawn.
"""
from __future__ import annotations

import math

#: Largest magnitude of a value or step the report uses: 1e15 examples/s, seconds, MB, % or a loss of
#: 1e15 is no measurement of a training run, and any sum or ratio of such values stays far from overflow.
LARGEST = 1e15
#: Largest event wall time (Unix seconds) used: about the year 5138.
LARGEST_WALL_TIME = 1e11
#: Values named one by one in a file's note; then "and N more".
NAMED = 3


def usable_value(value: float) -> bool:
    """Whether a logged value is used: NaN (drawn as nothing) or finite with ``|value| <= LARGEST``."""
    return math.isnan(value) or abs(value) <= LARGEST


def usable_point(value: float, wall_time: float, step: int) -> bool:
    """Whether a scalar event is used: a usable value, a finite wall time and a step within ``LARGEST``."""
    return (usable_value(value) and math.isfinite(wall_time) and abs(wall_time) <= LARGEST_WALL_TIME
            and abs(step) <= LARGEST)


def is_positive(value: float | None) -> bool:
    """A finite value above zero (a rate a ratio can be taken against)."""
    return value is not None and math.isfinite(value) and value > 0


def shown(value: float) -> str:
    """``value`` for a note: ``inf``, ``-inf``, ``nan`` or up to 6 significant digits."""
    return f"{value:.6g}"


def left_out_note(points: list[tuple[str, int, float, float]], count: int) -> str:
    """One line naming the first points left out of a file, ``(tag, step, value, wall_time)`` each, of
    ``count`` in all."""
    named = []
    for tag, step, value, wall_time in points[:NAMED]:
        if not usable_value(value):
            named.append(f"{tag} = {shown(value)} at step {step:,}")
        elif abs(step) > LARGEST:
            named.append(f"{tag} at step {step:,}")
        else:
            named.append(f"{tag} at step {step:,} written at wall time {shown(wall_time)}")
    more = f" (and {count - len(named):,} more)" if count > len(named) else ""
    return (f"{count:,} value(s) left out, infinite or beyond ±{LARGEST:.0e} (or a step or wall time "
            f"beyond what a run writes): {'; '.join(named)}{more}")
