"""Plain-text tables and the numbers in them: medians, rates and ratios."""
from __future__ import annotations

import statistics
from typing import Sequence

FAILED = "failed"


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def rate(values: Sequence[float], runs: int) -> str:
    """``median (min-max)`` of the successful runs, marking how many of ``runs`` failed."""
    if not values:
        return FAILED
    text = f"{median(values):,.0f}"
    if len(values) > 1:
        text += f" ({min(values):,.0f}-{max(values):,.0f})"
    if len(values) < runs:
        text += f" [{runs - len(values)}/{runs} failed]"
    return text


def ratio(numerator: Sequence[float], denominator: Sequence[float]) -> str:
    """Ratio of the medians, e.g. ``0.97x``; ``-`` when either side has no result."""
    top, bottom = median(numerator), median(denominator)
    if top is None or bottom is None or bottom == 0:
        return "-"
    return f"{top / bottom:.2f}x"


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns separated by `` | ``, padded to the widest cell; text left, numbers right."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        padded = []
        for cell, width in zip(cells, widths):
            cell = str(cell)
            numeric = cell[:1].isdigit() or cell in (FAILED, "-")
            padded.append(cell.rjust(width) if numeric else cell.ljust(width))
        return " | ".join(padded).rstrip()

    rule = "-+-".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])
