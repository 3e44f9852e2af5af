"""The results beside each run's HParams: what it reached, how fast, and when it got there.

    columns, rows = result_table(runs, {"run-a": 3196.2}, [("run-a", "val_accuracy>=0.9", 8.3)])
    # columns: ("loss", "accuracy", "val_loss", "val_accuracy", "test loss", ..., "examples/s",
    #           "train time (s)", "time to val_accuracy>=0.9 (s)"); one row of cells per run

Columns, each only when some run has it:

* ``loss``, ``accuracy``, ``val_loss``, ``val_accuracy``: the value at the last epoch logged in
  ``train/`` and ``validation/`` (the accuracy tag is ``epoch_accuracy`` or the run's first
  ``epoch_*accuracy``);
* ``test <metric>``: the run's ``evaluate/<metric>`` record (``TensorBoardRun.record_evaluation``);
* ``examples/s``: the figure of the "Examples per second per run" panel (epochs 2..);
* ``train time (s)``: the run's ``train_time_s`` record, else its last ``epoch_wall_time_s``;
* ``time to <target> (s)``: seconds from the start of training to the target, ``not reached``
  when the run recorded that it never got there.

A NaN is shown as ``nan`` (a loss that diverged); a run without the figure has an empty cell.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from tfdist.report.events import MAIN, Run
from tfdist.report.tags import (EVALUATE_PREFIX, LOSS_TAG, TRAIN, TRAIN_TIME_TAG, VALIDATION, WALL_TIME_TAG,
                                accuracy_tag)

RATE_COLUMN = "examples/s"
TRAIN_TIME_COLUMN = "train time (s)"
NOT_REACHED = "not reached"


def _number(value: float, digits: str = ".4g") -> str:
    return "nan" if math.isnan(value) else format(value, digits)


def _last(run: Run, sub: str, tag: str | None) -> float | None:
    series = run.series(sub, tag) if tag is not None else None
    return series.last if series is not None else None


def _finals(run: Run) -> dict[str, float]:
    """``{column: value}`` of the run's last-epoch figures and its test figures."""
    found: dict[str, float] = {}
    accuracy = accuracy_tag(run)
    for sub, prefix in ((TRAIN, ""), (VALIDATION, "val_")):
        for tag in (LOSS_TAG, accuracy):
            value = _last(run, sub, tag)
            if value is not None:
                found[prefix + tag.removeprefix("epoch_")] = value
    for tag in run.tags(MAIN):
        if tag.startswith(EVALUATE_PREFIX):
            found[f"test {tag[len(EVALUATE_PREFIX):]}"] = run.series(MAIN, tag).last
    return found


def _train_time(run: Run) -> float | None:
    value = _last(run, MAIN, TRAIN_TIME_TAG)
    if value is None or not math.isfinite(value):
        value = _last(run, TRAIN, WALL_TIME_TAG)
    return value if value is not None and math.isfinite(value) else None


def _time_column(target: str) -> str:
    return f"time to {target} (s)"


def result_table(runs: Sequence[Run], rates: Mapping[str, float | None],
                 times: Iterable[tuple[str, str, float]]) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The result columns (see the module doc) and one row of cells per run of ``runs``, in order.

    ``rates`` is each run's examples/s (None: not logged), ``times`` ``(run, target, seconds)`` with
    NaN seconds for a target never reached."""
    cells: dict[str, dict[str, str]] = {run.name: {} for run in runs}
    finals: list[str] = []
    for run in runs:
        for column, value in _finals(run).items():
            cells[run.name][column] = _number(value)
            if column not in finals:
                finals.append(column)
        rate = rates.get(run.name)
        if rate is not None and math.isfinite(rate):
            cells[run.name][RATE_COLUMN] = _number(rate, ",.0f")
        train_time = _train_time(run)
        if train_time is not None:
            cells[run.name][TRAIN_TIME_COLUMN] = _number(train_time, ",.1f")
    targets: list[str] = []
    for run, target, seconds in times:
        if run in cells:
            cells[run][_time_column(target)] = NOT_REACHED if math.isnan(seconds) else _number(seconds, ",.1f")
            if target not in targets:
                targets.append(target)
    order = [*_ordered(finals), RATE_COLUMN, TRAIN_TIME_COLUMN, *(_time_column(t) for t in sorted(targets))]
    columns = tuple(c for c in order if any(c in row for row in cells.values()))
    return columns, tuple(tuple(cells[run.name].get(c, "") for c in columns) for run in runs)


def _ordered(finals: list[str]) -> list[str]:
    """Training figures, then validation, then test; loss first within each."""
    def key(column: str) -> tuple[int, int, str]:
        group = 2 if column.startswith("test ") else 1 if column.startswith("val_") else 0
        return group, 0 if column.endswith("loss") else 1, column
    return sorted(finals, key=key)
