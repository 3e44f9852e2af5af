"""The panels of the report: which ones have something to draw, how each is drawn, and why the others
are left out.

    for title, draw in panels(data):       # only the panels with something to draw, in page order
        draw(ax, data)
    left_out(data)                          # [(title, what would fill it)] for the standard panels not drawn

Colours: each run keeps one colour on every panel (the runs in order, matplotlib's tab10, tab20 past
ten runs). Within a run, its workers are shades of the run's colour from dark (the lowest rank) to
light, each bar labelled with its rank; system tasks are line styles. Training is solid, validation
dashed.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from matplotlib.axes import Axes
from matplotlib.patches import Patch

from tfdist.report.data import TRAIN, ReportData
from tfdist.report.tags import WALL_TIME_TAG

#: Longest run or folder name in a legend or on an axis (the HTML table has them whole).
LABEL_CHARACTERS = 40
#: Most workers of a run whose bars are labelled with their rank (more would overlap).
LABELLED_WORKERS = 16

Panel = tuple[str, Callable[[Axes, ReportData], None]]


def colours(data: ReportData) -> dict[str, tuple]:
    """``{run: RGBA}``: one colour per run, the same on every panel."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(data.runs) <= 10 else "tab20"]
    return {run: cmap(i % cmap.N) for i, run in enumerate(data.runs)}


def shade(colour: tuple, index: int, count: int) -> tuple:
    """The ``index``-th of ``count`` shades of ``colour``: itself first, lighter towards white after."""
    mix = 0.0 if count <= 1 else 0.65 * index / (count - 1)
    return (*(c + (1.0 - c) * mix for c in colour[:3]), 1.0)


def _short(text: str, limit: int = LABEL_CHARACTERS) -> str:
    """A label cut to ``limit`` characters, on one line, so a long run name cannot squash a panel."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _legend(ax: Axes, **kwargs) -> None:
    """A legend when something is labelled (else matplotlib warns that there is nothing to show)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, **kwargs)


def _time_axis(ax: Axes, times: list[float], label: str) -> None:
    ax.set_xlabel(label)
    ax.set_xlim(left=min(0.0, min(times, default=0.0)))
    ax.grid(alpha=0.3)


def _switches(ax: Axes, data: ReportData, runs: set[str]) -> None:
    """A dotted line, in the run's colour, where each adaptive run of ``runs`` took up another plan."""
    run_colours = colours(data)
    for part in data.segments:
        if part.run in runs and part.first_epoch > 0 and part.start_s is not None:
            ax.axvline(part.start_s, color=run_colours[part.run], linestyle=":", linewidth=1)
            ax.text(part.start_s, 1.0, f" \u2192 {_short(part.variant, 20)}", transform=ax.get_xaxis_transform(),
                    fontsize=6, va="top", color=run_colours[part.run])


def _curves(ax: Axes, data: ReportData, curves, ylabel: str) -> None:
    run_colours = colours(data)
    for c in curves:
        ax.plot(c.times, c.values, "-" if c.sub == TRAIN else "--", marker="o", markersize=2.5,
                color=run_colours[c.run], label=f"{_short(c.run)} ({_short(c.sub)})")
    _switches(ax, data, {c.run for c in curves if c.clock == WALL_TIME_TAG})
    clocks = sorted({c.clock for c in curves})
    _time_axis(ax, [t for c in curves for t in c.times],
               f"wall-clock seconds since training start ({', '.join(clocks)})")
    ax.set_ylabel(ylabel)
    _legend(ax, loc="best")


def draw_loss(ax: Axes, data: ReportData) -> None:
    """Training (solid) and validation (dashed) loss of every run against wall-clock time."""
    _curves(ax, data, data.loss, "loss")


def draw_accuracy(ax: Axes, data: ReportData) -> None:
    """Training and validation accuracy of every run against wall-clock time."""
    _curves(ax, data, data.accuracy, "accuracy")


def _rated(data: ReportData) -> list:
    return [t for t in data.throughput if t.examples_per_second is not None]


def draw_throughput(ax: Axes, data: ReportData) -> None:
    """Examples/s of every run (all workers together), one bar per run."""
    rows = _rated(data)
    run_colours = colours(data)
    ax.barh(range(len(rows)), [t.examples_per_second for t in rows], color=[run_colours[t.run] for t in rows])
    ax.set_yticks(range(len(rows)), [_short(t.run) for t in rows], fontsize=7)
    ax.invert_yaxis()
    for i, t in enumerate(rows):
        ax.text(t.examples_per_second, i, f" {t.examples_per_second:,.0f}", va="center", fontsize=7)
    ax.set_xlabel("examples/s, all workers (first epoch left out)")
    ax.grid(axis="x", alpha=0.3)


def _group_label(t) -> str:
    lines = [_short(t.run)]
    total = f"workers add up to {t.per_worker_sum:,.0f}"
    if t.examples_per_second is not None:
        total += f"; run {t.examples_per_second:,.0f}"
    lines.append(total)
    if t.spread is not None and math.isfinite(t.spread):
        lines.append(f"spread {t.spread:.2f}")
    return "\n".join(lines)


def draw_per_worker(ax: Axes, data: ReportData) -> None:
    """Each worker's examples/s, grouped by run in shades of the run's colour and labelled with the
    worker's rank; under each group the workers' sum beside the run's own figure, and the spread."""
    rows = [t for t in data.throughput if t.per_worker]
    run_colours = colours(data)
    width = 0.8 / max(len(t.per_worker) for t in rows)
    for i, t in enumerate(rows):
        count = len(t.per_worker)
        for j, (rank, rate) in enumerate(t.per_worker):
            x = i - 0.4 + width * (j + 0.5)
            ax.bar(x, rate, width * 0.9, color=shade(run_colours[t.run], j, count),
                   edgecolor=run_colours[t.run], linewidth=0.8)
            if count <= LABELLED_WORKERS:
                ax.text(x, rate, f"w{_short(rank, 6)}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(rows)), [_group_label(t) for t in rows], fontsize=6)
    ax.set_ylabel("examples/s per worker")
    ax.set_xlabel("each bar: one worker's training examples/s (epochs 2..), a shade of its run's colour",
                  fontsize=7)
    ax.margins(y=0.12)
    ax.grid(axis="y", alpha=0.3)


def draw_scaling(ax: Axes, data: ReportData) -> None:
    """Scaling efficiency against worker count, one line per group of runs that differ only in workers."""
    groups: dict[str, list] = {}
    for point in data.scaling:
        groups.setdefault(point.group, []).append(point)
    for group, points in groups.items():
        ax.plot([p.workers for p in points], [p.efficiency for p in points], marker="o", color="0.25",
                linestyle=["-", "--", ":", "-."][len(ax.get_lines()) % 4], label=_short(group))
    counts = sorted({p.workers for p in data.scaling})
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle=":")
    ax.set_xticks(counts)
    ax.set_xlabel("workers    (efficiency at n = rate(n) / ((n / m) * rate(m)), m = the fewest workers)")
    ax.set_ylabel("scaling efficiency (1 = linear)")
    ax.set_ylim(bottom=min(0.0, min(p.efficiency for p in data.scaling)))
    ax.grid(alpha=0.3)
    _legend(ax)


def _reached(data: ReportData) -> list:
    return [r for r in data.time_to_target if math.isfinite(r.seconds)]


def draw_time_to_target(ax: Axes, data: ReportData) -> None:
    """Seconds each run took to reach each target; runs that never reached it are marked."""
    records = data.time_to_target
    targets = sorted({r.target for r in records})
    runs = [run for run in data.runs if any(r.run == run for r in records)]
    run_colours = colours(data)
    width = 0.8 / len(runs)
    for j, run in enumerate(runs):
        for i, target in enumerate(targets):
            seconds = next((r.seconds for r in records if r.run == run and r.target == target), None)
            x = i - 0.4 + width * (j + 0.5)
            if seconds is None:
                continue
            if math.isfinite(seconds):
                ax.bar(x, seconds, width * 0.9, color=run_colours[run], label=_short(run))
            else:
                ax.text(x, 0, "not\nreached", ha="center", va="bottom", fontsize=6, color=run_colours[run])
    ax.set_xticks(range(len(targets)), [_short(t) for t in targets], fontsize=7)
    ax.set_ylabel("seconds from training start")
    ax.grid(axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=6)


def draw_system(ax: Axes, data: ReportData, tag: str, ylabel: str) -> None:
    """One system metric of every task of every run against seconds since training started."""
    curves = [c for c in data.system if c.tag == tag]
    run_colours = colours(data)
    styles = ["-", "--", ":", "-."]
    tasks = sorted({c.sub for c in curves})
    for c in curves:
        ax.plot(c.times, c.values, styles[tasks.index(c.sub) % len(styles)], color=run_colours[c.run],
                marker="o", markersize=2 if len(c.times) > 1 else 4,  # a run of one second is one point
                label=f"{_short(c.run)} {_short(c.sub.split('/', 1)[-1])}")
    _time_axis(ax, [t for c in curves for t in c.times], "seconds since training start")
    ax.set_ylabel(ylabel)
    _legend(ax)


def draw_predictions(ax: Axes, data: ReportData) -> None:
    """Each planned run's predicted examples/s (hatched) beside its measured median, with the ratio."""
    rows = data.predictions
    run_colours = colours(data)
    height = 0.38
    ends = [0.0]
    for i, p in enumerate(rows):
        predicted = p.predicted_examples_per_second if math.isfinite(p.predicted_examples_per_second) else 0.0
        ax.barh(i - height / 2, predicted, height, color="white", edgecolor=run_colours[p.run], hatch="//")
        measured = p.measured_examples_per_second
        if measured is None or not math.isfinite(measured):
            measured = None
        else:
            ax.barh(i + height / 2, measured, height, color=run_colours[p.run])
        ratio = f"measured/predicted {p.ratio:.2f}" if p.ratio is not None else "not measured"
        ax.text(max(predicted, measured or 0.0), i, f"  {ratio}", va="center", fontsize=7)
        ends += [predicted, measured or 0.0]
    ax.set_yticks(range(len(rows)), [f"{_short(p.run)}\n{_short(p.plan)}" for p in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("examples/s, all workers (measured: median over epochs 2..)")
    low, high = min(ends), max(ends)
    span = (high - low) or 1.0  # all bars 0: still an axis, with room for the ratios
    ax.set_xlim(low, high + 0.6 * span)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(facecolor="white", edgecolor="0.3", hatch="//", label="predicted"),
                       Patch(facecolor="0.45", label="measured (median)")], fontsize=6, loc="lower right")


def draw_segments(ax: Axes, data: ReportData) -> None:
    """Each adaptive run's plans on its clock: one bar per plan, from the end of the last plan's last
    epoch (the switch is in the bar) to the end of its own, labelled with what it measured and was
    predicted."""
    runs = list(dict.fromkeys(part.run for part in data.segments))
    run_colours = colours(data)
    ends = [0.0]
    for row, run in enumerate(runs):
        parts = [part for part in data.segments if part.run == run]
        for index, part in enumerate(parts):
            if part.start_s is None or part.end_s is None or not part.end_s >= part.start_s:
                continue
            ax.barh(row, part.end_s - part.start_s, 0.6, left=part.start_s, edgecolor=run_colours[run],
                    color=shade(run_colours[run], index % 2, 3), linewidth=0.8)
            measured = (f"{part.measured_examples_per_second:,.0f}" if part.measured_examples_per_second is not None
                        else "not measured")
            ax.text(part.start_s, row, f" {_short(part.variant, 24)}, {part.epochs}\n measured {measured}, "
                    f"predicted {part.predicted_examples_per_second:,.0f} ex/s", va="center", fontsize=6)
            ends.append(part.end_s)
    ax.set_yticks(range(len(runs)), [_short(run) for run in runs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0.0, max(ends) * 1.05 or 1.0)
    ax.set_xlabel(f"wall-clock seconds since training start ({WALL_TIME_TAG}); a plan's first epoch includes "
                  "the switch to it", fontsize=7)
    ax.grid(axis="x", alpha=0.3)


def _system_panel(tag: str, ylabel: str) -> Callable[[Axes, ReportData], None]:
    return lambda ax, data: draw_system(ax, data, tag, ylabel)


def _catalogue(data: ReportData) -> list[tuple[str, Callable[[Axes, ReportData], None], bool, str | None]]:
    """Every panel in page order: ``(title, draw, has something to draw, what would fill it)``; a
    panel with no "what would fill it" is left out silently (it belongs to some runs only)."""
    targets = "TensorBoardRun(..., targets={'val_accuracy': 0.9}) records them"
    return [
        ("Loss against wall-clock time", draw_loss, bool(data.loss),
         "no run logged epoch_loss (Keras' TensorBoard callback or TensorBoardRun writes it)"),
        ("Accuracy against wall-clock time", draw_accuracy, bool(data.accuracy),
         "no run logged an epoch_*accuracy (compile with metrics=['accuracy'])"),
        ("Examples per second per run", draw_throughput, bool(_rated(data)),
         "no run logged examples/s: add strategy.metrics(batch_size) to fit's callbacks"),
        ("Examples per second per worker", draw_per_worker, any(t.per_worker for t in data.throughput),
         "no run logged per-worker figures: strategy.metrics(batch_size) logs them for Horovod and "
         "parameter-server runs"),
        ("Scaling efficiency against workers", draw_scaling, bool(data.scaling),
         "it needs runs whose hparams differ only in workers: the same script run at, say, 1 and 2 workers "
         "into one logdir"),
        ("Time to target", draw_time_to_target, bool(_reached(data)),
         "no run reached its target (the results table says which did not)" if data.time_to_target
         else f"no run recorded a target: {targets}"),
        ("Predicted against measured examples per second", draw_predictions, bool(data.predictions), None),
        ("Plans of adaptive runs against wall-clock time", draw_segments, any(
            part.start_s is not None and part.end_s is not None for part in data.segments), None),
        ("CPU per task", _system_panel("system/cpu_percent", "CPU %"),
         any(c.tag == "system/cpu_percent" for c in data.system), None),
        ("Resident memory per task", _system_panel("system/rss_mb", "RSS (MB)"),
         any(c.tag == "system/rss_mb" for c in data.system), None),
    ]


def panels(data: ReportData) -> list[Panel]:
    """The panels with something to draw, in page order."""
    return [(title, draw) for title, draw, drawn, _ in _catalogue(data) if drawn]


def left_out(data: ReportData) -> list[tuple[str, str]]:
    """``(title, why, and what would fill it)`` of each standard panel with nothing to draw."""
    return [(title, why) for title, _, drawn, why in _catalogue(data) if not drawn and why is not None]


def left_out_lines(data: ReportData) -> list[str]:
    """One line per standard panel not drawn: ``Not drawn: <title>: <why, and what would fill it>``."""
    return [f"Not drawn: {title}: {why}" for title, why in left_out(data)]
