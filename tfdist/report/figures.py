"""Matplotlib figures of a :class:`~tfdist.report.data.ReportData`, as PNG bytes.

    pngs = panel_pngs(data)      # [(title, png bytes)], one per panel with something to draw
    png = page_png(data)         # those panels, a line per panel left out, the HParams and results table

Drawn with the Agg canvas on ``matplotlib.figure.Figure`` objects (no pyplot, no global backend),
so it runs headless and leaves matplotlib's state alone; mathtext is off while they are drawn (the
labels are the user's text, ``$`` included). What each panel shows, its colours and when
it is left out: :mod:`tfdist.report.panels`. A panel that fails to draw shows why instead (and the
reason is added to ``failed``), so one panel cannot cost the page.
"""
from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from typing import Any

import matplotlib

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tfdist.report.data import ReportData
from tfdist.report.panels import (LABEL_CHARACTERS, draw_accuracy, draw_loss, draw_per_worker, draw_predictions,
                                  draw_scaling, draw_segments, draw_system, draw_throughput, draw_time_to_target, left_out,
                                  left_out_lines, panels)

__all__ = ["DPI", "LABEL_CHARACTERS", "PANEL_SIZE", "draw_accuracy", "draw_loss", "draw_per_worker",
           "draw_predictions", "draw_scaling", "draw_segments", "draw_system", "draw_throughput", "draw_time_to_target",
           "left_out", "left_out_lines", "page_png", "page_size", "panel_pngs", "panels"]

#: Inches of one panel, and the resolution of every PNG.
PANEL_SIZE = (7.0, 4.2)
DPI = 100
_TABLE_ROW_INCHES = 0.28
_LINE_INCHES = 0.22
_TABLE_FONT = 7


def _draw(ax: Axes, title: str, draw: Callable[[Axes, ReportData], None], data: ReportData,
          failed: list[str] | None) -> None:
    """``draw`` on ``ax`` under ``title``; a failure is written on the panel and added to ``failed``."""
    try:
        draw(ax, data)
    except Exception as exc:  # noqa: BLE001 - the drawing boundary: one panel never costs the page
        reason = f"the panel {title!r} could not be drawn ({type(exc).__name__}: {str(exc)[:200]})"
        ax.clear()
        ax.text(0.5, 0.5, reason, ha="center", va="center", wrap=True, fontsize=8, color="0.35",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        if failed is not None:
            failed.append(reason)
    ax.set_title(title, fontsize=10)


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buffer)
    return buffer.getvalue()


def _plain_text(function: Callable) -> Callable:
    """``function`` with matplotlib's mathtext off: run names, tags and plans are the user's text,
    and a ``$`` in them must be drawn, not parsed (an unbalanced ``$a_{`` raised when the page was
    rendered, past every panel's guard)."""
    @functools.wraps(function)
    def plain(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context({"text.parse_math": False}):
            return function(*args, **kwargs)

    return plain


@_plain_text
def panel_pngs(data: ReportData, failed: list[str] | None = None) -> list[tuple[str, bytes]]:
    """One PNG of ``PANEL_SIZE`` inches at ``DPI`` per panel with something to draw, with its title."""
    out = []
    for title, draw in panels(data):
        figure = Figure(figsize=PANEL_SIZE, dpi=DPI, layout="constrained")
        _draw(figure.add_subplot(), title, draw, data, failed)
        out.append((title, _png(figure)))
    return out


def _table_inches(data: ReportData) -> float:
    return 0.6 + _TABLE_ROW_INCHES * (len(data.hparam_rows) + 1)


def _lines_inches(data: ReportData) -> float:
    lines = left_out_lines(data)
    return 0.2 + _LINE_INCHES * len(lines) if lines else 0.0


def page_size(data: ReportData) -> tuple[int, int]:
    """Pixels ``(width, height)`` of :func:`page_png`: two panels a row, the panels left out, then the
    table."""
    rows = math.ceil(len(panels(data)) / 2)
    width = 2 * PANEL_SIZE[0]
    height = rows * PANEL_SIZE[1] + _lines_inches(data) + _table_inches(data)
    return round(width * DPI), round(height * DPI)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= LABEL_CHARACTERS else text[: LABEL_CHARACTERS - 1] + "\u2026"


def _table(ax: Axes, data: ReportData) -> None:
    """The HParams and the results of every run, one row each; result headers on a tinted ground."""
    ax.axis("off")
    ax.set_title("HParams and results (results: last epoch; test: evaluate; examples/s: epochs 2..)",
                 fontsize=10)
    if not data.hparam_rows:
        return
    columns = [*data.hparam_columns, *data.result_columns]
    results = data.result_rows or tuple(() for _ in data.hparam_rows)
    labels = [_short(c) for c in columns]
    cells = [[_short(c) for c in (*row, *result)] for row, result in zip(data.hparam_rows, results)]
    room = 0.94 * 2 * PANEL_SIZE[0]  # inches: the page less its margins
    font, ems = _table_font([labels, *cells], room)
    table = ax.table(cellText=cells, colLabels=labels, loc="upper center", cellLoc="left",
                     colWidths=[em * font / 72.0 / room * 0.94 for em in ems])
    table.set_in_layout(False)  # placed in its axes; constrained layout would shift the axes around it
    table.auto_set_font_size(False)
    table.set_fontsize(font)
    for i in range(len(data.hparam_columns), len(columns)):
        table[0, i].set_facecolor("#e8eef7")


def _table_font(cells: list[list[str]], inches: float) -> tuple[float, list[float]]:
    """The font size (points) at which a table of ``cells`` (header row first) fits ``inches``, at most
    ``_TABLE_FONT``, and each column's width in ems (0.66 em a character and 1.6 em of padding)."""
    ems = [0.66 * max(len(row[i]) for row in cells) + 1.6 for i in range(len(cells[0]))]
    return max(3.0, min(float(_TABLE_FONT), 72.0 * inches / sum(ems))), ems


@_plain_text
def page_png(data: ReportData, failed: list[str] | None = None) -> bytes:
    """The panels, two a row, a line per panel left out and the table below, on one PNG of
    :func:`page_size`."""
    chosen = panels(data)
    rows = math.ceil(len(chosen) / 2)
    width, height = page_size(data)
    figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    # the table in a sub-figure of its own: the panels' axis labels do not narrow it
    upper_inches = rows * PANEL_SIZE[1] + _lines_inches(data)
    upper, lower = figure.subfigures(2, 1, height_ratios=[upper_inches or 1e-6, _table_inches(data)])
    heights = [PANEL_SIZE[1]] * rows + ([_lines_inches(data)] if _lines_inches(data) else [])
    if heights:
        grid = upper.add_gridspec(len(heights), 2, height_ratios=heights)
        for i, (title, draw) in enumerate(chosen):
            _draw(upper.add_subplot(grid[i // 2, i % 2]), title, draw, data, failed)
        if _lines_inches(data):
            notes = upper.add_subplot(grid[rows, :])
            notes.axis("off")
            notes.text(0.0, 1.0, "\n".join(left_out_lines(data)), ha="left", va="top", fontsize=8, color="0.3",
                       transform=notes.transAxes)
    _table(lower.add_subplot(), data)
    return _png(figure)
