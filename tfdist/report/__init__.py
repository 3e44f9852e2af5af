"""``tfdist report``: one page comparing the runs of a TensorBoard logdir, drawn with matplotlib.

    from tfdist.report import write_report
    write_report("runs", "runs/report.html")   # or "report.png"

:mod:`~tfdist.report.events` reads the event files (TensorBoard's reader),
:mod:`~tfdist.report.data` turns them into the numbers each figure shows,
:mod:`~tfdist.report.figures` draws them and :mod:`~tfdist.report.html` builds the page.
"""
from __future__ import annotations

import os

from tfdist.errors import ArgumentValueError, with_fix

#: The file kinds ``write_report`` can write, by suffix.
SUFFIXES = (".html", ".png")


def check_out(out: str) -> str:
    """``out``'s suffix (``.html`` or ``.png``), or an error naming the accepted ones."""
    suffix = os.path.splitext(out)[1].lower()
    if suffix not in SUFFIXES:
        raise ArgumentValueError(with_fix(
            f"`out` must end in .html or .png, got {out!r}",
            "pass e.g. runs/report.html (a page with the figures embedded) or report.png (one image)"))
    return suffix


def write_report(runs_dir: str, out: str) -> str:
    """Read the runs of ``runs_dir``, draw them and write ``out`` (.html or .png); returns ``out``."""
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs
    from tfdist.report.figures import page_png, panel_pngs
    from tfdist.report.html import render_html

    suffix = check_out(out)
    data = report_data(load_runs(runs_dir))
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    if suffix == ".png":
        with open(out, "wb") as file:
            file.write(page_png(data))
    else:
        with open(out, "w", encoding="utf-8") as file:
            file.write(render_html(data, panel_pngs(data), runs_dir))
    return out
