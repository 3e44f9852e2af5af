"""``tfdist report``: one page comparing the runs of a TensorBoard logdir, drawn with matplotlib.

    from tfdist.report import write_report
    write_report("runs", "runs/report.html")   # or "report.png"; warn=print to see what was not read

:mod:`~tfdist.report.files` finds the runs and their event files (bounded, nothing opened),
:mod:`~tfdist.report.events` reads them (:mod:`~tfdist.report.records` frames the records),
leaving out values no run logs (:mod:`~tfdist.report.values`), :mod:`~tfdist.report.data` turns them
into the numbers each figure shows (the tags it reads: :mod:`~tfdist.report.tags`) and
:mod:`~tfdist.report.results` into each run's results, :mod:`~tfdist.report.panels` draws each panel
(or says why it is left out), :mod:`~tfdist.report.figures` renders them, :mod:`~tfdist.report.html`
builds the page and :mod:`~tfdist.report.output` checks and writes the file.

Layering: beside ``tfdist.advise``: it may import :mod:`tfdist.plan` and the ground modules; only the
CLI imports it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tfdist.errors import with_fix
from tfdist.report.output import SUFFIXES, ReportError, check_out

__all__ = ["SUFFIXES", "NothingReadError", "ReportError", "check_out", "listed", "write_report"]

_log = logging.getLogger(__name__)


class NothingReadError(ReportError):
    """No run of the runs folder could be read; ``lines`` says why, one line per run."""

    def __init__(self, message: str, lines: Sequence[str]):
        super().__init__(message)
        self.lines = tuple(lines)


def listed(lines: Sequence[str], limit: int, what: str = "runs") -> list[str]:
    """At most ``limit`` of ``lines``, then ``... and N more <what>`` when there were more."""
    if len(lines) <= limit:
        return list(lines)
    return [*lines[:limit], f"... and {len(lines) - limit:,} more {what}"]


def write_report(runs_dir: str, out: str, warn: Callable[[str], None] | None = None) -> str:
    """Read the runs of ``runs_dir``, draw them and write ``out`` (.html or .png); returns ``out``.

    ``warn`` gets one line per run read in part or not read (at most ``MAX_LISTED``, then ``... and N
    more``; default: this module's logger), one per figure that could not be computed or drawn; those
    are also on the page. Raises
    ``ArgumentValueError`` for a bad ``out``, :class:`~tfdist.report.files.RunsDirError` for a runs
    folder without runs or over a limit, :class:`NothingReadError` when no run could be read and
    :class:`ReportError` when ``out`` cannot be written (nothing is left half-written).
    """
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs
    from tfdist.report.figures import page_png, panel_pngs
    from tfdist.report.html import render_html
    from tfdist.report.limits import MAX_LISTED
    from tfdist.report.output import write_atomic

    suffix = check_out(out)
    runs = load_runs(runs_dir)
    data = report_data(runs)
    if not data.runs:
        raise NothingReadError(with_fix(
            f"none of the {len(runs):,} run(s) of {runs_dir!r} could be read (each is named above with why)",
            "fix or remove the files named, or pass the --logdir your training wrote to"),
            listed(data.not_read, MAX_LISTED, "runs not read"))
    warn = warn or _log.warning
    for line in listed(data.not_read, MAX_LISTED, "runs read in part or not read"):
        warn(line)
    for line in data.notes:
        warn(line)
    failed: list[str] = []
    if suffix == ".png":
        content = page_png(data, failed)
    else:
        content = render_html(data, panel_pngs(data, failed), runs_dir).encode("utf-8", "backslashreplace")
    for line in failed:
        warn(line)
    write_atomic(out, content)
    return out
