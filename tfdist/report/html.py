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

from tfdist.report.data import ReportData

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
.panels { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; }
.panels img { width: 100%; max-width: 700px; height: auto; }
table { border-collapse: collapse; font-size: 0.85em; margin-top: 0.5em; }
th, td { border: 1px solid #bbb; padding: 3px 8px; text-align: left; }
th { background: #eee; }
"""


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
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tfdist report: {escape(runs_dir)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>tfdist report: {escape(runs_dir)}</h1>
<p>{len(data.runs)} runs, made {made} by <code>tfdist report</code>. Solid lines: training; dashed: validation.</p>
<div class="panels">
{figures}
</div>
<h2>HParams</h2>
<table><thead><tr>{head}</tr></thead>
<tbody>
{body}
</tbody></table>
</body></html>
"""
