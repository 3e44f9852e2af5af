"""What the report draws, as plain numbers: the figures are drawn from a :class:`ReportData` only.

    data = report_data(load_runs("runs"))
    data.loss[0].times, data.loss[0].values      # a run's training loss against wall-clock seconds

Choices, each visible in the figures' labels:

* **time axis**: ``epoch_wall_time_s`` (seconds since training started, at each epoch's end) when
  the run logged it, else the event's wall time minus the run's first event's;
* **examples/s of a run**: the run's ``mean_examples_per_second`` record when present (Throughput's
  summary: first epoch left out), else the mean of ``epoch_examples_per_second`` over the epochs
  after the first (all epochs when there is only one); per worker the same over
  ``epoch_worker/<rank>/examples_per_second`` (each worker's training examples over the epoch's time:
  a run's workers add up to about the run's figure; ``Throughput.per_worker_sum`` shows it);
* **scaling efficiency**: runs whose hparams are equal except ``workers``, ``global_batch_size``
  and ``time_to_*`` form a group; repeats of one worker count are averaged; efficiency at ``n``
  workers = ``throughput(n) / ((n / m) * throughput(m))``, ``m`` the group's smallest worker count
  (1.0 at ``m``; ``m`` = 1 gives the textbook ``throughput(n) / (n * throughput(1))``); only runs
  with a rate above 0 take part, and a group whose efficiency is not a usable number is a note;
* **time-to-target**: the run's ``time_to_target/<target>`` scalars (last value) and every hparam
  whose name starts with ``time_to_``; NaN means never reached;
* **predicted vs measured** (runs started from an advisor plan): ``advice/predicted_examples_per_second``
  (written once) beside the *median* of ``advice/measured_examples_per_second`` over the epochs after
  the first (all epochs when there is only one), ratio = measured / predicted; the same for step
  times (``advice/*_step_ms``); backend and variant from the ``plan/backend`` and ``plan/variant``
  hparams, the other ``plan/<option>`` hparams (all but ``tfdist.plan.HPARAM_FIELDS``) as the
  plan's options;
* **plan segments** (an adaptive run, which switched plans mid-run): the ``advice/segment/<variant>``
  scalars, one at the step of each plan's first epoch; each plan's epochs are those from its step to
  the next plan's, its time on the run's clock from the end of the last plan's last epoch (0 for the
  first) to the end of its own last one (``epoch_wall_time_s``, which a resumed plan continues), and
  its predicted-vs-measured row is over its own epochs (median after its first); a run of one plan
  keeps one row as above;
* **runs shown**: those with a scalar or an hparam; the others, and the files read in part, are
  ``not_read`` lines saying why (values no run logs, infinite or beyond 1e15, are left out as they
  are read: :mod:`tfdist.report.values`); a figure that cannot be computed from what was read is a
  ``notes`` line;
* **results** (beside the HParams): :mod:`tfdist.report.results`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean, median

from tfdist.plan import HPARAM_FIELDS, SEGMENT_PREFIX, backend_of
from tfdist.report.events import MAIN, Run, run_line
from tfdist.report.results import result_table
from tfdist.report.tags import (LOSS_TAG, MEAN_RATE_TAG, MEASURED_RATE_TAG, MEASURED_STEP_TAG, PLAN_PREFIX,
                                PREDICTED_RATE_TAG, PREDICTED_STEP_TAG, RATE_TAG, RATIO_TAG, SCALING_FREE,
                                SYSTEM_PREFIX, SYSTEM_TAGS, TIME_TO_HPARAM_PREFIX, TIME_TO_TARGET_PREFIX, TRAIN,
                                VALIDATION, WALL_TIME_TAG, accuracy_tag)
from tfdist.report.values import is_positive, shown, usable_value

__all__ = ["TRAIN", "VALIDATION", "Curve", "Prediction", "ReportData", "ScalingPoint", "Segment", "Throughput",
           "TimeToTarget", "accuracy_tag", "curve", "hparam_table", "prediction", "predictions", "report_data",
           "scaling", "segments", "throughput", "time_to_target"]

_WORKER_TAG = re.compile(r"^epoch_worker/(?P<rank>[^/]+)/(?P<metric>.+)$")


@dataclass(frozen=True)
class Curve:
    """One run's metric against wall-clock seconds; ``clock`` says which clock (see module doc)."""

    run: str
    sub: str
    tag: str
    times: tuple[float, ...]
    values: tuple[float, ...]
    clock: str


@dataclass(frozen=True)
class Throughput:
    """A run's examples/s and, when logged, each worker's examples/s and step time (ms)."""

    run: str
    examples_per_second: float | None
    source: str
    per_worker: tuple[tuple[str, float], ...] = ()
    step_time_ms_per_worker: tuple[tuple[str, float], ...] = ()
    spread: float | None = None

    @property
    def per_worker_sum(self) -> float | None:
        """The workers' examples/s added up (about ``examples_per_second``), None without them."""
        return math.fsum(rate for _, rate in self.per_worker) if self.per_worker else None


@dataclass(frozen=True)
class ScalingPoint:
    """One worker count of one scaling group (its runs averaged)."""

    group: str
    workers: int
    runs: tuple[str, ...]
    examples_per_second: float
    baseline_workers: int
    efficiency: float


@dataclass(frozen=True)
class TimeToTarget:
    """Seconds from the start of training until ``run`` reached ``target`` (NaN: never)."""

    run: str
    target: str
    seconds: float


@dataclass(frozen=True)
class Prediction:
    """A run's predicted examples/s (and step time) beside what it measured (see the module doc)."""

    run: str
    predicted_examples_per_second: float
    measured_examples_per_second: float | None
    ratio: float | None
    epochs: int
    predicted_step_ms: float | None = None
    measured_step_ms: float | None = None
    backend: str | None = None
    variant: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    #: For one plan of an adaptive run: ``epochs A-B`` (1-based) it trained; None for a run of one plan.
    segment: str | None = None

    @property
    def plan(self) -> str:
        """``backend / variant`` of the plan (and the epochs of its segment), or what of it is known."""
        text = " / ".join(p for p in (self.backend, self.variant) if p) or "plan not recorded"
        return text if self.segment is None else f"{text}, {self.segment}"


@dataclass(frozen=True)
class Segment:
    """One plan of an adaptive run: its epochs (``first_epoch`` done when it took over, ``last_epoch``
    done when it ended) and its span on the run's clock (None where the run did not log it)."""

    run: str
    variant: str
    first_epoch: int
    last_epoch: int
    start_s: float | None
    end_s: float | None
    predicted_examples_per_second: float
    measured_examples_per_second: float | None

    @property
    def epochs(self) -> str:
        """The epochs it trained, 1-based: ``epochs 5-10``."""
        first, last = self.first_epoch + 1, self.last_epoch
        return f"epoch {first}" if first == last else f"epochs {first}-{last}"


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows; built by :func:`report_data`."""

    runs: tuple[str, ...]
    loss: tuple[Curve, ...]
    accuracy: tuple[Curve, ...]
    throughput: tuple[Throughput, ...]
    scaling: tuple[ScalingPoint, ...]
    time_to_target: tuple[TimeToTarget, ...]
    system: tuple[Curve, ...]
    hparam_columns: tuple[str, ...]
    hparam_rows: tuple[tuple[str, ...], ...]
    predictions: tuple[Prediction, ...] = ()
    #: The plans of the adaptive runs (those that switched plans), in run and epoch order.
    segments: tuple[Segment, ...] = ()
    not_read: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    result_columns: tuple[str, ...] = ()
    result_rows: tuple[tuple[str, ...], ...] = ()


def _mean_after_first(values: Sequence[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    if not values:
        return None
    kept = [v for v in values[1:] if math.isfinite(v)] if len(values) > 1 else finite
    return fmean(kept) if kept else (fmean(finite) if finite else None)


def _median_after_first(values: Sequence[float]) -> float | None:
    """The median of the finite values after the first (of all of them when there is only one)."""
    kept = [v for v in (values[1:] if len(values) > 1 else values) if math.isfinite(v)]
    return median(kept) if kept else None


def prediction(run: Run) -> Prediction | None:
    """The run's predicted-vs-measured record (None without ``advice/predicted_examples_per_second``)."""
    predicted = run.series(MAIN, PREDICTED_RATE_TAG)
    if predicted is None:
        return None
    rate = predicted.values[0]
    measured = run.series(MAIN, MEASURED_RATE_TAG)
    measured_rate = _median_after_first(measured.values) if measured is not None else None
    epochs = len(measured.values) if measured is not None else 0
    ratio = measured_rate / rate if measured_rate is not None and is_positive(rate) else None
    if measured_rate is None and (ratios := run.series(MAIN, RATIO_TAG)) is not None:
        ratio, epochs = _median_after_first(ratios.values), len(ratios.values)
        measured_rate = ratio * rate if ratio is not None and math.isfinite(rate) else None
    if ratio is not None and not usable_value(ratio):  # against a rate near 0: no figure to draw
        ratio = None
    step = run.series(MAIN, PREDICTED_STEP_TAG)
    measured_step = run.series(MAIN, MEASURED_STEP_TAG)
    plan = {k[len(PLAN_PREFIX):]: v for k, v in run.hparams.items() if k.startswith(PLAN_PREFIX)}
    backend, variant = plan.pop("backend", None), plan.pop("variant", None)
    for field in HPARAM_FIELDS:  # the plan's own fields: what is left are its options
        plan.pop(field, None)
    return Prediction(
        run.name, rate, measured_rate, ratio, epochs,
        predicted_step_ms=step.values[0] if step is not None else None,
        measured_step_ms=_median_after_first(measured_step.values) if measured_step is not None else None,
        backend=None if backend is None else _cell(backend),
        variant=None if variant is None else _cell(variant),
        options=tuple(sorted((k, _cell(v)) for k, v in plan.items())))


def _plan_starts(run: Run) -> list[tuple[int, str, float]]:
    """``(first epoch, variant, predicted examples/s)`` of each plan the run trained on, by epoch; a
    plan that follows itself (a fit run again on the same plan) is one segment."""
    starts = sorted((step, tag[len(SEGMENT_PREFIX):], value) for tag in run.tags(MAIN) if tag.startswith(SEGMENT_PREFIX)
                    for step, value in zip(run.series(MAIN, tag).steps, run.series(MAIN, tag).values))
    merged: list[tuple[int, str, float]] = []
    for start in starts:
        if not merged or merged[-1][1] != start[1]:
            merged.append(start)
    return merged


def _between(series, low: int, high: float) -> list[float]:
    """The values of ``series`` (None: none) at steps in ``(low, high]``, by step."""
    if series is None:
        return []
    return [v for step, v in sorted(zip(series.steps, series.values)) if low < step <= high]


def segments(run: Run) -> tuple[Segment, ...]:
    """The plans of ``run`` when it switched plans (two or more), else empty (see the module doc)."""
    starts = _plan_starts(run)
    if len(starts) < 2:
        return ()
    measured = run.series(MAIN, MEASURED_RATE_TAG)
    wall = run.series(TRAIN, WALL_TIME_TAG)
    wall_at = dict(zip(wall.steps, wall.values)) if wall is not None else {}  # by 0-based epoch
    last_step = max([*(measured.steps if measured is not None else ()), *(s + 1 for s in wall_at)], default=0)
    found = []
    for index, (first, variant, predicted) in enumerate(starts):
        last = starts[index + 1][0] if index + 1 < len(starts) else max(last_step, first + 1)
        start_s = 0.0 if first == 0 else wall_at.get(first - 1)
        found.append(Segment(run.name, variant, first, last, start_s, wall_at.get(last - 1), predicted,
                             _median_after_first(_between(measured, first, last))))
    return tuple(found)


def predictions(run: Run, parts: tuple[Segment, ...] | None = None) -> tuple[Prediction, ...]:
    """The run's predicted-vs-measured rows: one per plan of an adaptive run (``parts``, default
    :func:`segments`), else :func:`prediction`'s one (none without a prediction)."""
    parts = segments(run) if parts is None else parts
    if not parts:
        one = prediction(run)
        return () if one is None else (one,)
    measured_steps = run.series(MAIN, MEASURED_STEP_TAG)
    predicted_steps = run.series(MAIN, PREDICTED_STEP_TAG)
    rows = []
    for part in parts:
        ratio = (part.measured_examples_per_second / part.predicted_examples_per_second
                 if part.measured_examples_per_second is not None and is_positive(part.predicted_examples_per_second)
                 else None)
        step_ms = _between(predicted_steps, part.first_epoch - 1, part.first_epoch)
        rows.append(Prediction(
            run.name, part.predicted_examples_per_second, part.measured_examples_per_second,
            ratio if ratio is not None and usable_value(ratio) else None,
            len(_between(run.series(MAIN, MEASURED_RATE_TAG), part.first_epoch, part.last_epoch)),
            predicted_step_ms=step_ms[0] if step_ms else None,
            measured_step_ms=_median_after_first(_between(measured_steps, part.first_epoch, part.last_epoch)),
            backend=backend_of(part.variant), variant=part.variant, segment=part.epochs))
    return tuple(rows)


def curve(run: Run, sub: str, tag: str) -> Curve | None:
    """``tag`` of ``<run>/<sub>/`` against wall-clock seconds (``epoch_wall_time_s`` by step when the
    run's ``train/`` logged it for every step of the series, else event time since the run's first event)."""
    series = run.series(sub, tag)
    if series is None:
        return None
    wall = run.series(TRAIN, WALL_TIME_TAG)
    by_step = dict(zip(wall.steps, wall.values)) if wall is not None else {}
    if by_step and all(step in by_step for step in series.steps):
        times, clock = [by_step[s] for s in series.steps], WALL_TIME_TAG
    else:
        origin = run.first_wall_time or 0.0
        times, clock = [t - origin for t in series.wall_times], "event time"
    return _drawn(Curve(run.name, sub, tag, tuple(times), series.values, clock))


def _drawn(c: Curve) -> Curve | None:
    """``c`` without its NaN points (nothing to draw: the tables show them), None when none is left."""
    points = [(t, v) for t, v in zip(c.times, c.values) if math.isfinite(t) and math.isfinite(v)]
    if not points:
        return None
    return Curve(c.run, c.sub, c.tag, tuple(t for t, _ in points), tuple(v for _, v in points), c.clock)


def throughput(run: Run) -> Throughput:
    """The run's examples/s overall and per worker (see the module doc for which epochs count)."""
    record = run.series(MAIN, MEAN_RATE_TAG)
    if record is not None and math.isfinite(record.last):
        rate, source = record.last, MEAN_RATE_TAG
    else:
        series = run.series(TRAIN, RATE_TAG)
        rate = _mean_after_first(series.values) if series is not None else None
        source = f"mean {RATE_TAG}, epochs 2.." if rate is not None else "not logged"
    rates: dict[str, float] = {}
    steps: dict[str, float] = {}
    for tag in run.tags(TRAIN):
        match = _WORKER_TAG.match(tag)
        if match is None:
            continue
        mean = _mean_after_first(run.series(TRAIN, tag).values)
        if mean is None:
            continue
        if match["metric"] == "examples_per_second":
            rates[match["rank"]] = mean
        elif match["metric"] == "step_time_ms":
            steps[match["rank"]] = mean
    spread_series = run.series(TRAIN, "epoch_worker_step_time_spread")
    spread = _mean_after_first(spread_series.values) if spread_series is not None else None
    return Throughput(run.name, rate, source, tuple(sorted(rates.items(), key=_rank_key)),
                      tuple(sorted(steps.items(), key=_rank_key)), spread)


def _rank_key(item: tuple[str, float]) -> tuple[int, str]:
    return (int(item[0]), "") if item[0].isdigit() else (1 << 30, item[0])


def _workers(run: Run) -> int | None:
    value = run.hparams.get("workers")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _group_key(run: Run) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in run.hparams.items()
                        if k not in SCALING_FREE and not k.startswith(TIME_TO_HPARAM_PREFIX)))


def _group_label(key: tuple[tuple[str, str], ...], keys: Iterable[tuple[tuple[str, str], ...]]) -> str:
    """The hparams that set this group apart from the others (all of them when it is alone)."""
    others = [dict(k) for k in keys if k != key]
    mine = dict(key)
    differing = {k: v for k, v in mine.items() if any(o.get(k) != v for o in others)} if others else {}
    shown = differing or {k: mine[k] for k in ("strategy",) if k in mine} or mine
    return ", ".join(f"{k}={v.strip(chr(39))}" for k, v in sorted(shown.items()))


def scaling(runs: Sequence[Run], rates: dict[str, float | None],
            notes: list[str] | None = None) -> tuple[ScalingPoint, ...]:
    """Scaling efficiency of every group with two or more worker counts (see the module doc); a group
    whose efficiency is not a usable number (a rate near 0 at its fewest workers) is left out with a
    line in ``notes``."""
    groups: dict[tuple, dict[int, list[Run]]] = {}
    for run in runs:
        workers, rate = _workers(run), rates.get(run.name)
        if workers is None or rate is None or not run.hparams:
            continue
        if is_positive(rate):
            groups.setdefault(_group_key(run), {}).setdefault(workers, []).append(run)
        elif notes is not None:
            notes.append(f"run {run.name!r} is left out of the scaling figure: its examples/s is {shown(rate)}, "
                         "and efficiency is taken against a rate above 0")
    points: list[ScalingPoint] = []
    scaling_groups = {key: counts for key, counts in groups.items() if len(counts) >= 2}
    for key, counts in sorted(scaling_groups.items()):
        label = _group_label(key, scaling_groups)
        means = {n: fmean(rates[r.name] for r in members) for n, members in counts.items()}
        base = min(means)
        group = [ScalingPoint(label, n, tuple(r.name for r in counts[n]), means[n], base,
                              means[n] / ((n / base) * means[base])) for n in sorted(means)]
        if all(usable_value(p.efficiency) and math.isfinite(p.efficiency) for p in group):
            points += group
        elif notes is not None:
            notes.append(f"scaling group {label!r} is not drawn: its examples/s at {base:,} workers, "
                         f"{shown(means[base])}, is too close to 0 for an efficiency against it")
    return tuple(points)


def time_to_target(run: Run) -> tuple[TimeToTarget, ...]:
    """The run's time-to-target records: ``time_to_target/*`` scalars, then ``time_to_*`` hparams."""
    found: dict[str, float] = {}
    for tag in run.tags(MAIN):
        if tag.startswith(TIME_TO_TARGET_PREFIX):
            found[tag[len(TIME_TO_TARGET_PREFIX):]] = run.series(MAIN, tag).last
    for name, value in sorted(run.hparams.items()):
        if (name.startswith(TIME_TO_HPARAM_PREFIX) and isinstance(value, (int, float))
                and not isinstance(value, bool) and usable_value(float(value))):
            found.setdefault(name[len(TIME_TO_HPARAM_PREFIX):].removeprefix("target/"), float(value))
    return tuple(TimeToTarget(run.name, target, seconds) for target, seconds in found.items())


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def hparam_table(runs: Sequence[Run]) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Columns (``run``, then the set-up hparams in a fixed order, then the rest sorted) and one row
    per run; a run without an hparam shows an empty cell."""
    first = ("strategy", "workers", "batch_size", "global_batch_size", "learning_rate")
    names = {name for run in runs for name in run.hparams}
    columns = ("run", *[n for n in first if n in names], *sorted(names - set(first)))
    rows = tuple((run.name, *(_cell(run.hparams[c]) if c in run.hparams else "" for c in columns[1:]))
                 for run in runs)
    return columns, rows


def report_data(runs: Sequence[Run]) -> ReportData:
    """The numbers of every figure and of the table, for ``runs`` (from :func:`load_runs`): the runs
    with data are shown; every run with a problem gives a ``not_read`` line."""
    not_read = tuple(line for run in runs if (line := run_line(run)) is not None)
    runs = [run for run in runs if run.has_data]
    loss = [c for run in runs for sub in (TRAIN, VALIDATION) if (c := curve(run, sub, LOSS_TAG))]
    accuracy = []
    for run in runs:
        tag = accuracy_tag(run)
        if tag is not None:
            accuracy += [c for sub in (TRAIN, VALIDATION) if (c := curve(run, sub, tag))]
    rates = [throughput(run) for run in runs]
    system = [c for run in runs for sub in run.subs(SYSTEM_PREFIX) for tag in SYSTEM_TAGS
              if (c := _system_curve(run, sub, tag))]
    columns, rows = hparam_table(runs)
    parts = [(run, segments(run)) for run in runs]
    notes: list[str] = []
    targets = tuple(t for run in runs for t in time_to_target(run))
    result_columns, result_rows = result_table(runs, {t.run: t.examples_per_second for t in rates},
                                               [(t.run, t.target, t.seconds) for t in targets])
    return ReportData(
        runs=tuple(run.name for run in runs), loss=tuple(loss), accuracy=tuple(accuracy),
        throughput=tuple(rates),
        scaling=scaling(runs, {t.run: t.examples_per_second for t in rates}, notes),
        time_to_target=targets, system=tuple(system), hparam_columns=columns, hparam_rows=rows,
        predictions=tuple(p for run, found in parts for p in predictions(run, found)),
        segments=tuple(part for _, found in parts for part in found), not_read=not_read,
        notes=tuple(notes), result_columns=result_columns, result_rows=result_rows)


def _system_curve(run: Run, sub: str, tag: str) -> Curve | None:
    """A system metric of one task against seconds: its step is whole seconds since training started."""
    series = run.series(sub, tag)
    if series is None:
        return None
    return _drawn(Curve(run.name, sub, tag, tuple(float(s) for s in series.steps), series.values, "step (s)"))
