"""A self-contained HTML page of the report: the panels as base64 PNGs and the HParams as a table.

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
from tfdist.report.limits import MAX_LISTED_ON_PAGE

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
.panels { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; }
.panels img { width: 100%; max-width: 700px; height: auto; }
table { border-collapse: collapse; font-size: 0.85em; margin-top: 0.5em; }
th, td { border: 1px solid #bbb; padding: 3px 8px; text-align: left; }
th { background: #eee; }
td.number { text-align: right; }
.problems li { font-family: monospace; font-size: 0.85em; }
"""
_PREDICTION_COLUMNS = ("run", "backend", "variant", "options", "predicted examples/s",
                       "measured examples/s (median, epochs 2..)", "measured / predicted", "epochs",
                       "predicted step (ms)", "measured step (ms, median)")


def _number(value: float | None, digits: str = ",.1f") -> str:
    return "" if value is None else format(value, digits)


def _prediction_row(p: Prediction) -> str:
    cells = [(p.run, ""), (p.backend or "", ""), (p.variant or "", ""),
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


def data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` of ``png``."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def render_html(data: ReportData, pngs: Sequence[tuple[str, bytes]], runs_dir: str) -> str:
    """The page: a heading naming ``runs_dir`` and the runs, the panels, then the HParams table."""
    figures = "\n".join(
        f'<img src="{data_uri(png)}" alt="{escape(title)}" title="{escape(title)}">' for title, png in pngs)
    head = "".join(f"<th>{escape(c)}</th>" for c in data.hparam_columns)
    body = "\n".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>"
                     for row in data.hparam_rows)
    made = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs = f"{len(data.runs)} runs"
    if data.not_read:
        runs += f" ({len(data.not_read):,} read in part or not read: listed below)"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tfdist report: {escape(runs_dir)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>tfdist report: {escape(runs_dir)}</h1>
<p>{runs}, made {made} by <code>tfdist report</code>. Solid lines: training; dashed: validation.</p>
<div class="panels">
{figures}
</div>
{_predictions(data)}{_not_read(data)}<h2>HParams</h2>
<table><thead><tr>{head}</tr></thead>
<tbody>
{body}
</tbody></table>
</body></html>
"""
