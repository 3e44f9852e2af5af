"""Matplotlib figures of a :class:`~tfdist.report.data.ReportData`, as PNG bytes.

    pngs = panel_pngs(data)      # [(title, png bytes)], one per panel, for the HTML page
    png = page_png(data)         # every panel and the HParams table on one image

Drawn with the Agg canvas on ``matplotlib.figure.Figure`` objects (no pyplot, no global backend),
so it runs headless and leaves matplotlib's state alone. Each run keeps one colour on every panel.
"""
from __future__ import annotations

import io
import math
from collections.abc import Callable

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from tfdist.report.data import TRAIN, ReportData

#: Inches of one panel, and the resolution of every PNG.
PANEL_SIZE = (7.0, 4.2)
DPI = 100
_TABLE_ROW_INCHES = 0.28
#: Longest run or folder name in a legend or on an axis (the HTML table has them whole).
LABEL_CHARACTERS = 40


def _colours(data: ReportData) -> dict[str, tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(data.runs) <= 10 else "tab20"]
    return {run: cmap(i % cmap.N) for i, run in enumerate(data.runs)}


def _short(text: str, limit: int = LABEL_CHARACTERS) -> str:
    """A label cut to ``limit`` characters, on one line, so a long run name cannot squash a panel."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9, color="0.35",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _curves(ax: Axes, data: ReportData, curves, ylabel: str, empty: str) -> None:
    if not curves:
        _note(ax, empty)
        return
    colours = _colours(data)
    for c in curves:
        ax.plot(c.times, c.values, "-" if c.sub == TRAIN else "--", marker="o", markersize=2.5,
                color=colours[c.run], label=f"{_short(c.run)} ({_short(c.sub)})")
    clocks = sorted({c.clock for c in curves})
    ax.set_xlabel(f"wall-clock seconds since training start ({', '.join(clocks)})")
    ax.set_xlim(left=0)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="best")


def draw_loss(ax: Axes, data: ReportData) -> None:
    """Training (solid) and validation (dashed) loss of every run against wall-clock time."""
    _curves(ax, data, data.loss, "loss", "no epoch_loss logged")


def draw_accuracy(ax: Axes, data: ReportData) -> None:
    """Training and validation accuracy of every run against wall-clock time."""
    _curves(ax, data, data.accuracy, "accuracy", "no epoch_*accuracy logged")


def draw_throughput(ax: Axes, data: ReportData) -> None:
    """Examples/s of every run (all workers together), one bar per run."""
    rows = [t for t in data.throughput if t.examples_per_second is not None]
    if not rows:
        _note(ax, "no epoch_examples_per_second logged (add strategy.throughput(batch_size) to fit)")
        return
    colours = _colours(data)
    ax.barh(range(len(rows)), [t.examples_per_second for t in rows], color=[colours[t.run] for t in rows])
    ax.set_yticks(range(len(rows)), [_short(t.run) for t in rows], fontsize=7)
    ax.invert_yaxis()
    for i, t in enumerate(rows):
        ax.text(t.examples_per_second, i, f" {t.examples_per_second:,.0f}", va="center", fontsize=7)
    ax.set_xlabel("examples/s, all workers (first epoch left out)")
    ax.grid(axis="x", alpha=0.3)


def draw_per_worker(ax: Axes, data: ReportData) -> None:
    """Each worker's examples/s, grouped by run; the title of a run's group gives its spread."""
    rows = [t for t in data.throughput if t.per_worker]
    if not rows:
        _note(ax, "no per-worker figures logged (epoch_worker/<rank>/examples_per_second)")
        return
    width = 0.8 / max(len(t.per_worker) for t in rows)
    labels, seen = [], set()
    for i, t in enumerate(rows):
        for j, (rank, rate) in enumerate(t.per_worker):
            ax.bar(i - 0.4 + width * (j + 0.5), rate, width * 0.9, color=f"C{j % 10}",
                   label=None if rank in seen else f"worker {rank}")
            seen.add(rank)
        spread = f"\nspread {t.spread:.2f}" if t.spread is not None and math.isfinite(t.spread) else ""
        labels.append(f"{_short(t.run)}{spread}")
    ax.set_xticks(range(len(rows)), labels, fontsize=6, rotation=20, ha="right")
    ax.set_ylabel("examples/s per worker")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=6)


def draw_scaling(ax: Axes, data: ReportData) -> None:
    """Scaling efficiency against worker count, one line per group of runs that differ only in workers."""
    if not data.scaling:
        _note(ax, "no scaling figure: it needs runs whose hparams differ only in workers")
        return
    groups: dict[str, list] = {}
    for point in data.scaling:
        groups.setdefault(point.group, []).append(point)
    for group, points in groups.items():
        ax.plot([p.workers for p in points], [p.efficiency for p in points], marker="o", label=group)
    counts = sorted({p.workers for p in data.scaling})
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle=":")
    ax.set_xticks(counts)
    ax.set_xlabel("workers    (efficiency at n = rate(n) / ((n / m) * rate(m)), m = the fewest workers)")
    ax.set_ylabel("scaling efficiency (1 = linear)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)


def draw_time_to_target(ax: Axes, data: ReportData) -> None:
    """Seconds each run took to reach each target; runs that never reached it are marked."""
    records = data.time_to_target
    if not records:
        _note(ax, "no time-to-target recorded (TensorBoardRun(..., targets={'val_accuracy': 0.9}))")
        return
    targets = sorted({r.target for r in records})
    runs = [run for run in data.runs if any(r.run == run for r in records)]
    colours = _colours(data)
    width = 0.8 / len(runs)
    labelled: set[str] = set()
    for j, run in enumerate(runs):
        for i, target in enumerate(targets):
            seconds = next((r.seconds for r in records if r.run == run and r.target == target), None)
            x = i - 0.4 + width * (j + 0.5)
            if seconds is None:
                continue
            if math.isfinite(seconds):
                ax.bar(x, seconds, width * 0.9, color=colours[run],
                       label=None if run in labelled else _short(run))
                labelled.add(run)
            else:
                ax.text(x, 0, "not\nreached", ha="center", va="bottom", fontsize=6, color=colours[run])
    ax.set_xticks(range(len(targets)), targets, fontsize=7)
    ax.set_ylabel("seconds from training start")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=6)


def draw_system(ax: Axes, data: ReportData, tag: str, ylabel: str) -> None:
    """One system metric of every task of every run against seconds since training started."""
    curves = [c for c in data.system if c.tag == tag]
    if not curves:
        _note(ax, f"no {tag} logged (SystemMetrics callback)")
        return
    colours = _colours(data)
    styles = ["-", "--", ":", "-."]
    tasks = sorted({c.sub for c in curves})
    for c in curves:
        ax.plot(c.times, c.values, styles[tasks.index(c.sub) % len(styles)], color=colours[c.run],
                label=f"{_short(c.run)} {_short(c.sub.split('/', 1)[-1])}")
    ax.set_xlabel("seconds since training start")
    ax.set_xlim(left=0)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)


def draw_predictions(ax: Axes, data: ReportData) -> None:
    """Each planned run's predicted examples/s (hatched) beside its measured median, with the ratio."""
    rows = data.predictions
    if not rows:
        _note(ax, "no advice/predicted_examples_per_second logged (runs started from a tfdist advise plan)")
        return
    colours = _colours(data)
    height = 0.38
    for i, p in enumerate(rows):
        predicted = p.predicted_examples_per_second if math.isfinite(p.predicted_examples_per_second) else 0.0
        ax.barh(i - height / 2, predicted, height, color="white", edgecolor=colours[p.run], hatch="//")
        measured = p.measured_examples_per_second
        if measured is None or not math.isfinite(measured):
            measured = None
        else:
            ax.barh(i + height / 2, measured, height, color=colours[p.run])
        ratio = f"measured/predicted {p.ratio:.2f}" if p.ratio is not None else "not measured"
        ax.text(max(predicted, measured or 0.0), i, f"  {ratio}", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [f"{_short(p.run)}\n{_short(p.plan)}" for p in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("examples/s, all workers (measured: median over epochs 2..)")
    ax.margins(x=0.35)
    ax.set_xlim(left=0)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(facecolor="white", edgecolor="0.3", hatch="//", label="predicted"),
                       Patch(facecolor="0.45", label="measured (median)")], fontsize=6, loc="lower right")


Panel = tuple[str, Callable[[Axes, ReportData], None]]


def panels(data: ReportData) -> list[Panel]:
    """The panels of the report in page order; the system ones and predicted-vs-measured only when some
    run logged them."""
    chosen: list[Panel] = [
        ("Loss against wall-clock time", draw_loss),
        ("Accuracy against wall-clock time", draw_accuracy),
        ("Examples per second per run", draw_throughput),
        ("Examples per second per worker", draw_per_worker),
        ("Scaling efficiency against workers", draw_scaling),
        ("Time to target", draw_time_to_target),
    ]
    if data.predictions:
        chosen.append(("Predicted against measured examples per second", draw_predictions))
    if data.system:
        chosen += [("CPU per task", lambda ax, d: draw_system(ax, d, "system/cpu_percent", "CPU %")),
                   ("Resident memory per task", lambda ax, d: draw_system(ax, d, "system/rss_mb", "RSS (MB)"))]
    return chosen


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buffer)
    return buffer.getvalue()


def panel_pngs(data: ReportData) -> list[tuple[str, bytes]]:
    """One PNG of ``PANEL_SIZE`` inches at ``DPI`` per panel, with its title."""
    out = []
    for title, draw in panels(data):
        figure = Figure(figsize=PANEL_SIZE, dpi=DPI, layout="constrained")
        ax = figure.add_subplot()
        draw(ax, data)
        ax.set_title(title, fontsize=10)
        out.append((title, _png(figure)))
    return out


def page_size(data: ReportData) -> tuple[int, int]:
    """Pixels ``(width, height)`` of :func:`page_png`: two panels a row, then the HParams table."""
    rows = math.ceil(len(panels(data)) / 2)
    width = 2 * PANEL_SIZE[0]
    height = rows * PANEL_SIZE[1] + _table_inches(data)
    return round(width * DPI), round(height * DPI)


def _table_inches(data: ReportData) -> float:
    return 0.6 + _TABLE_ROW_INCHES * (len(data.hparam_rows) + 1)


def page_png(data: ReportData) -> bytes:
    """Every panel, two a row, and the HParams table below them, on one PNG of :func:`page_size`."""
    chosen = panels(data)
    rows = math.ceil(len(chosen) / 2)
    width, height = page_size(data)
    figure = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    grid = figure.add_gridspec(rows + 1, 2, height_ratios=[PANEL_SIZE[1]] * rows + [_table_inches(data)])
    for i, (title, draw) in enumerate(chosen):
        ax = figure.add_subplot(grid[i // 2, i % 2])
        draw(ax, data)
        ax.set_title(title, fontsize=10)
    table_ax = figure.add_subplot(grid[rows, :])
    table_ax.axis("off")
    table_ax.set_title("HParams", fontsize=10)
    if data.hparam_rows:
        table = table_ax.table(cellText=[[_short(c) for c in r] for r in data.hparam_rows],
                               colLabels=[_short(c) for c in data.hparam_columns],
                               loc="upper center", cellLoc="left")
        table.auto_set_font_size(False)
        table.set_fontsize(7)
        table.auto_set_column_width(list(range(len(data.hparam_columns))))
    return _png(figure)
