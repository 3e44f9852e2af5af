"""A self-contained HTML page of the report: the panels as base64 PNGs, a line per panel left out, and
the HParams with each run's results as one table.

    Path("runs/report.html").write_text(render_html(data, panel_pngs(data), "runs"))

Nothing is fetched when the page opens (no scripts, styles or images from elsewhere), so it can be
mailed or attached to an issue as one file.
"""
from __future__ import annotations

import base64
import datetime
from collections.abc import Sequence
from html import escape

from tfdist.report.data import Prediction, ReportData
from tfdist.report.panels import left_out_lines
from tfdist.report.limits import MAX_LISTED_ON_PAGE

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
.panels { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; }
.panels img { width: 100%; max-width: 700px; height: auto; }
table { border-collapse: collapse; font-size: 0.85em; margin-top: 0.5em; }
.wide { overflow-x: auto; }
table.runs { font-size: 0.78em; }
table.runs td { overflow-wrap: anywhere; }
th, td { border: 1px solid #bbb; padding: 3px 8px; text-align: left; }
table.runs th, table.runs td { padding: 2px 5px; }
th { background: #eee; }
td.number { text-align: right; white-space: nowrap; }
th.results { background: #e8eef7; }
.problems li { font-family: monospace; font-size: 0.85em; }
.left-out { color: #555; font-size: 0.9em; margin: 0.2em 0; }
"""
_PREDICTION_COLUMNS = ("run", "backend", "variant", "epochs of the plan", "options", "predicted examples/s",
                       "measured examples/s (median, epochs 2..)", "measured / predicted", "epochs",
                       "predicted step (ms)", "measured step (ms, median)")


def _number(value: float | None, digits: str = ",.1f") -> str:
    return "" if value is None else format(value, digits)


def _prediction_row(p: Prediction) -> str:
    cells = [(p.run, ""), (p.backend or "", ""), (p.variant or "", ""), (p.segment or "all", ""),
             (", ".join(f"{k}={v}" for k, v in p.options), ""),
             (_number(p.predicted_examples_per_second), "number"),
             (_number(p.measured_examples_per_second), "number"),
             (_number(p.ratio, ".3f"), "number"), (str(p.epochs), "number"),
             (_number(p.predicted_step_ms), "number"), (_number(p.measured_step_ms), "number")]
    return "<tr>" + "".join(f'<td class="{css}">{escape(text)}</td>' if css else f"<td>{escape(text)}</td>"
                            for text, css in cells) + "</tr>"


def _predictions(data: ReportData) -> str:
    """The predicted-vs-measured table, or nothing when no run logged a prediction."""
    if not data.predictions:
        return ""
    head = "".join(f"<th>{escape(c)}</th>" for c in _PREDICTION_COLUMNS)
    rows = "\n".join(_prediction_row(p) for p in data.predictions)
    return (f'<h2>Predicted vs measured</h2>\n<table class="predictions"><thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{rows}\n</tbody></table>\n")


def _not_read(data: ReportData) -> str:
    """The runs not read or read in part, one line each (at most MAX_LISTED_ON_PAGE)."""
    if not data.not_read:
        return ""
    lines = data.not_read[:MAX_LISTED_ON_PAGE]
    more = len(data.not_read) - len(lines)
    items = "\n".join(f"<li>{escape(line)}</li>" for line in lines)
    if more:
        items += f"\n<li>... and {more:,} more runs read in part or not read</li>"
    return (f"<h2>Runs not read or read in part ({len(data.not_read):,})</h2>\n"
            f'<ul class="problems">\n{items}\n</ul>\n')


def _lines(data: ReportData) -> str:
    """The panels left out, one line each, and the figures that could not be computed."""
    lines = [*left_out_lines(data), *(f"Note: {note}" for note in data.notes)]
    return "".join(f'<p class="left-out">{escape(line)}</p>\n' for line in lines)


def _table(data: ReportData) -> str:
    """The HParams and the results of every run, one row each, under two grouped headings."""
    results = data.result_rows or tuple(() for _ in data.hparam_rows)
    groups = f'<th colspan="{len(data.hparam_columns)}">HParams</th>'
    if data.result_columns:
        groups += f'<th class="results" colspan="{len(data.result_columns)}">Results</th>'
    head = "".join(f"<th>{escape(c)}</th>" for c in data.hparam_columns)
    head += "".join(f'<th class="results">{escape(c)}</th>' for c in data.result_columns)
    body = "\n".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row)
                     + "".join(f'<td class="number">{escape(cell)}</td>' for cell in result) + "</tr>"
                     for row, result in zip(data.hparam_rows, results))
    return (f'<div class="wide"><table class="runs"><thead><tr>{groups}</tr>\n<tr>{head}</tr></thead>\n'
            f"<tbody>\n{body}\n</tbody></table></div>\n"
            "<p class=\"left-out\">Results: the last epoch logged (val_: validation), test: "
            "<code>evaluate</code>, examples/s: all workers, epochs 2.., train time and time to a target: "
            "seconds from the start of training.</p>\n")


def data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` of ``png``."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def render_html(data: ReportData, pngs: Sequence[tuple[str, bytes]], runs_dir: str) -> str:
    """The page: a heading naming ``runs_dir`` and the runs, the panels, then the HParams table."""
    figures = "\n".join(
        f'<img src="{data_uri(png)}" alt="{escape(title)}" title="{escape(title)}">' for title, png in pngs)
    made = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs = f"{len(data.runs)} runs"
    if data.not_read:
        runs += f" ({len(data.not_read):,} read in part or not read: listed below)"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tfdist report: {escape(runs_dir)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>tfdist report: {escape(runs_dir)}</h1>
<p>{runs}, made {made} by <code>tfdist report</code>. Each run has one colour on every panel (its
workers: shades of it, labelled w&lt;rank&gt;). Solid lines: training; dashed: validation.</p>
<div class="panels">
{figures}
</div>
{_lines(data)}{_predictions(data)}{_not_read(data)}<h2>HParams</h2>
{_table(data)}</body></html>
"""
