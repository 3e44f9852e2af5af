"""`tfdist report` on event files that hold extreme values (issue 34): never a traceback or a Python
warning; a value no run can log (infinite, beyond 1e15, at an absurd step or wall time) is left out and
named, with its file, tag, step and value; the rest is drawn.

The values are written as float64 tensors (``events.write_points``, tests/report/conftest.py): float32,
which Keras writes, turns 1e308 into inf, and both must be handled.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

from support import examples, invoke

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

T0 = 1_700_000_000.0
HUGE = 1e308


def _epochs(tag: str, values: list[float]) -> list[tuple[str, int, float, float]]:
    return [(tag, step, T0 + step, value) for step, value in enumerate(values)]


def _run(events, root: Path, name: str, train=(), main=(), system=(), hparams=None) -> dict[str, Path]:
    """A run ``name`` with a normal loss curve and the given extra points; its event files by folder."""
    folder = root / name
    files = {"train": events.write_points(folder / "train", [*_epochs("epoch_loss", [1.0, 0.5, 0.3]), *train])}
    files["main"] = events.write_points(folder, list(main), hparams=hparams)
    if system:
        files["system"] = events.write_points(folder / "system" / "chief", list(system))
    return files


def _one_run(tag: str, values: list[float], where: str = "train"):
    def build(events, root: Path) -> list[tuple[str, str, str]]:
        points = _epochs(tag, values)
        files = _run(events, root, "r", **{where: points})
        first = next(i for i, v in enumerate(values) if not math.isfinite(v) or abs(v) > 1e15)
        relative = files[where].relative_to(root / "r").as_posix()
        return [("r", relative, f"{tag} = {values[first]:.6g} at step {first}")]
    return build


def _scaling(rates: dict[str, tuple[int, float]]):
    def build(events, root: Path) -> list[tuple[str, str, str]]:
        named = []
        for name, (workers, rate) in rates.items():
            files = _run(events, root, name, main=[("mean_examples_per_second", 3, T0 + 3, rate)],
                         hparams={"strategy": "horovod", "workers": workers})
            if not math.isfinite(rate) or abs(rate) > 1e15:
                named.append((name, files["main"].relative_to(root / name).as_posix(),
                              f"mean_examples_per_second = {rate:.6g} at step 3"))
        return named
    return build


# the six tracebacks of issue 34, each: (what the old code raised, the runs folder)
ISSUE_CASES = {
    "epoch-rate": _one_run("epoch_examples_per_second", [HUGE, HUGE, HUGE]),  # OverflowError in fsum
    "worker-rate": _one_run("epoch_worker/0/examples_per_second", [HUGE, HUGE, HUGE]),  # OverflowError in fsum
    "scaling-rates": _scaling({"w1": (1, 100.0), "w2a": (2, HUGE), "w2b": (2, HUGE)}),  # OverflowError in fsum
    "loss": _one_run("epoch_loss", [1.0, HUGE, -HUGE]),  # ValueError: arange: cannot compute length
    "system": _one_run("system/cpu_percent", [50.0, HUGE, -HUGE], where="system"),  # the same
    "zero-scaling-rate": _scaling({"w1": (1, 0.0), "w2": (2, 100.0)}),  # ZeroDivisionError
}


@pytest.mark.parametrize("out_kind", ["png", "html"])
@pytest.mark.parametrize("case", sorted(ISSUE_CASES))
def test_the_issues_extreme_values_are_named_never_a_traceback(events, tmp_path, case, out_kind):
    named = ISSUE_CASES[case](events, tmp_path / "runs")
    out = tmp_path / f"report.{out_kind}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a matplotlib UserWarning is a failure too
        result = invoke("report", str(tmp_path / "runs"), "--out", str(out))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and out.stat().st_size > 0
    lines = result.stderr.splitlines()
    for run, file, value in named:
        line = next((line for line in lines if line.startswith(f"Warning: run '{run}' read in part: {file}: ")), None)
        assert line is not None, (run, file, lines)
        assert "left out, infinite or beyond ±1e+15" in line and value in line and "; fix: " in line
    if case == "zero-scaling-rate":
        assert lines == ["Warning: run 'w1' is left out of the scaling figure: its examples/s is 0, and efficiency "
                         "is taken against a rate above 0"]
    else:
        assert len(lines) == len(named), lines


# --- every tag the report reads, with values drawn from the extremes ---------------------------------------------

EXTREMES = [math.inf, -math.inf, math.nan, HUGE, -HUGE, 1e16, -1e16, 1e15, 0.0, -0.0, -1.0, -250.0, 5e-324,
            -5e-324, 2.2250738585072014e-308, 1e-300, 0.5, 1.0, 3.0, 900.0]
VALUES = st.sampled_from(EXTREMES) | st.floats(allow_nan=True, allow_infinity=True)
STEPS = st.sampled_from([0, 1, 2, 7, -1, 10 ** 15, 10 ** 15 + 1, 2 ** 63 - 1, -(2 ** 63)]) | st.integers(-(2 ** 63), 2 ** 63 - 1)
WALL_TIMES = st.sampled_from([T0, T0 + 1, T0 + 60, 0.0, -1.0, math.inf, -math.inf, math.nan, HUGE, 1e11, 1e12]) | st.floats()
#: (folder, tag) of every scalar the report reads
TAGS = [("train", "epoch_loss"), ("validation", "epoch_loss"), ("train", "epoch_accuracy"),
        ("validation", "epoch_accuracy"), ("train", "epoch_examples_per_second"), ("train", "epoch_wall_time_s"),
        ("train", "epoch_worker/0/examples_per_second"), ("train", "epoch_worker/1/examples_per_second"),
        ("train", "epoch_worker/0/step_time_ms"), ("train", "epoch_worker_step_time_spread"),
        (".", "mean_examples_per_second"), (".", "time_to_target/val_accuracy>=0.9"), (".", "train_time_s"),
        (".", "evaluate/loss"), (".", "advice/predicted_examples_per_second"), (".", "advice/predicted_step_ms"),
        (".", "advice/measured_examples_per_second"), (".", "advice/measured_step_ms"),
        (".", "advice/measured_over_predicted"), ("system/chief", "system/cpu_percent"),
        ("system/chief", "system/rss_mb")]
HPARAM_NUMBERS = st.sampled_from([math.inf, -math.inf, math.nan, HUGE, 2.0 ** 60, 0, -3, 1, 2, 4]) | st.floats()


@st.composite
def runs(draw) -> list[tuple[str, dict, dict[str, list[tuple[str, int, float, float]]]]]:
    """Two to three runs: hparams (workers, a time_to_ record) and, per folder, points of every tag."""
    found = []
    for name in draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=2, max_size=3, unique=True)):
        hparams = {"strategy": "horovod", "workers": draw(HPARAM_NUMBERS), "time_to_val_accuracy": draw(HPARAM_NUMBERS)}
        folders: dict[str, list] = {}
        for folder, tag in TAGS:
            if draw(st.integers(0, 9)) == 0:
                continue  # some tags missing, as in real runs
            steps = draw(st.lists(STEPS, min_size=1, max_size=4)) if draw(st.booleans()) else [0, 1, 2]
            folders.setdefault(folder, []).extend(
                (tag, step, draw(WALL_TIMES) if draw(st.integers(0, 3)) == 0 else T0 + i, draw(VALUES))
                for i, step in enumerate(steps))
        found.append((name, hparams, folders))
    return found


def _usable(tag_point: tuple[str, int, float, float]) -> bool:
    _, step, wall_time, value = tag_point
    return ((math.isnan(value) or abs(value) <= 1e15) and math.isfinite(wall_time) and abs(wall_time) <= 1e11
            and abs(step) <= 1e15)


def _build(events, root: Path, plan) -> dict[tuple[str, str], list]:
    """The runs folder of ``plan``; ``{(run, relative file): points}``."""
    written = {}
    for name, hparams, folders in plan:
        for folder, points in folders.items():
            path = events.write_points(root / name / folder, points, hparams=hparams if folder == "." else None)
            written[(name, path.relative_to(root / name).as_posix())] = points
        if "." not in folders:
            events.write_points(root / name, [], hparams=hparams)
    return written


SLOW_FUZZ = settings(database=None, deadline=None, max_examples=examples(60),
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                            HealthCheck.data_too_large])


@SLOW_FUZZ
@given(plan=runs())
def test_extreme_values_are_read_as_usable_or_named(events, tmp_path_factory, plan):
    """What is read: every usable point (by value, step and wall time), and each file with points left out
    names how many and the first of them, with its value; the numbers of every figure stay usable."""
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs
    from tfdist.report.values import shown

    root = tmp_path_factory.mktemp("extreme")
    written = _build(events, root, plan)
    loaded = {run.name: run for run in load_runs(str(root))}
    for (name, relative), points in written.items():
        run = loaded[name]
        sub = relative.rsplit("/", 1)[0] if "/" in relative else "."
        kept = {(tag, step) for tag, step, _, _ in filter(_usable, points)}
        read = {(tag, step) for (s, tag), series in run.scalars.items() if s == sub for step in series.steps}
        assert read == kept
        left = [p for p in points if not _usable(p)]
        notes = [str(p) for p in run.problems if p.path == relative]
        if not left:
            assert notes == []
            continue
        (note,) = notes
        tag, step, _, value = left[0]
        assert note.startswith(f"{relative}: {len(left):,} value(s) left out") and f"{tag} " in note
        assert f"at step {step:,}" in note
        if not (math.isnan(value) or abs(value) <= 1e15):
            assert f"{tag} = {shown(value)} at step {step:,}" in note
    data = report_data(list(loaded.values()))
    figures = ([c.times for c in data.loss + data.accuracy + data.system] + [c.values for c in data.loss + data.system]
               + [[t.examples_per_second or 0.0, *(r for _, r in t.per_worker)] for t in data.throughput]
               + [[p.efficiency, p.examples_per_second] for p in data.scaling])
    assert all(math.isfinite(x) and abs(x) <= 1e16 for numbers in figures for x in numbers)


DRAWN = settings(database=None, deadline=None, max_examples=examples(25),
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                        HealthCheck.data_too_large])


@DRAWN
@given(plan=runs(), out_kind=st.sampled_from(["png", "html"]))
def test_extreme_values_are_drawn_without_a_traceback_or_a_warning(events, tmp_path_factory, plan, out_kind):
    """The whole report, drawn for real: exit 0, the page written, no Python warning (matplotlib's
    UserWarnings included), no panel that failed to draw, and every stderr line one named problem."""
    root = tmp_path_factory.mktemp("extreme-drawn")
    _build(events, root / "runs", plan)
    out = root / f"report.{out_kind}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = invoke("report", str(root / "runs"), "--out", str(out))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert out.stat().st_size > 0
    for line in result.stderr.splitlines():
        assert line.startswith(("Warning: run '", "Warning: scaling group ")), line
        assert "could not be drawn" not in line
