"""`tfdist report` on real runs of examples/classifier.py, as `make demo` trains them (issue 34): the
rate a run trained at, per-worker figures that add up to the run's, one meaning per colour, results
beside the HParams, and no empty panel, on pages checked in headless Chromium.

The runs are three cases of the examples' shared jobs (tests/example_jobs.py, ``REPORTED``: 2 epochs,
so "epochs 2.." exists): the single backend in one process, Horovod under ``horovodrun -np 2`` and
parameter servers under ``tfdist launch --workers 2 --ps 1``, both with ``auto`` as scripts/demo.sh runs
them (each in its launcher's shared job, beside the other cases of that job). This file
and tests/examples/test_examples.py are one unit of work, so each job trains once for both; the tests
copy the run folders they need into a logdir.
"""
from __future__ import annotations

import math
import shutil
import warnings
from pathlib import Path

import pytest
from browser import ink, screenshot
from example_jobs import REPORTED

from support import invoke

LR = 0.001  # classifier.py's --lr default: the single-worker rate
BATCH = 32  # the examples' jobs' --batch-size


def _run_folder(shared_run, backend: str) -> Path:
    """The one TensorBoard run of the case ``REPORTED[backend]``, once it trained."""
    result, where = shared_run(REPORTED[backend])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run,) = [p for p in (where / "runs").iterdir() if p.is_dir()]
    return run


@pytest.fixture
def single_run(shared_run) -> Path:
    return _run_folder(shared_run, "single")


@pytest.fixture
def horovod_run(shared_run) -> Path:
    return _run_folder(shared_run, "horovod")


@pytest.fixture
def ps_run(shared_run) -> Path:
    return _run_folder(shared_run, "parameter_server")


def _logdir(tmp_path: Path, *runs: Path) -> Path:
    logdir = tmp_path / "logdir"
    for run in runs:
        shutil.copytree(run, logdir / run.name)
    return logdir


def _data(logdir: Path):
    from tfdist.report.data import report_data
    from tfdist.report.events import load_runs

    return report_data(load_runs(str(logdir)))


def _report(logdir: Path, out: Path):
    """``tfdist report`` in this process, with every Python warning (matplotlib's too) an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = invoke("report", str(logdir), "--out", str(out))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0 and result.stderr == "", result.output
    return out


def _cell(data, run: str, column: str) -> str:
    row = data.runs.index(run)
    if column in data.hparam_columns:
        return data.hparam_rows[row][data.hparam_columns.index(column)]
    return data.result_rows[row][data.result_columns.index(column)]


def _drawn_panels_have_ink(data) -> None:
    """Every panel on the page draws something: lines with points, or bars."""
    from matplotlib.figure import Figure

    from tfdist.report.figures import panels

    for title, draw in panels(data):
        ax = Figure().add_subplot()
        draw(ax, data)
        points = sum(len(line.get_xdata()) for line in ax.get_lines() if line.get_marker() not in (None, "None", ""))
        bars = [p for p in ax.patches if p.get_width() * p.get_height() != 0]
        assert points or bars, f"the panel {title!r} draws nothing"


@pytest.mark.slow
@pytest.mark.horovod
def test_the_horovod_run_records_and_shows_the_rate_it_trained_at(horovod_run, tmp_path):
    """`lr` 0.001 was shown for the demo's Horovod run, which trained at 0.002 (scaled by 2 ranks)."""
    from tfdist.report.events import load_run

    run = load_run(str(horovod_run))
    assert run.hparams["learning_rate"] == pytest.approx(2 * LR)  # read from the optimizer as training began
    assert run.hparams["base_lr"] == pytest.approx(LR) and "lr" not in run.hparams
    assert run.series("train", "epoch_lr").last == pytest.approx(2 * LR)  # the warm-up's rate at the epoch's end
    data = _data(_logdir(tmp_path, horovod_run))
    assert _cell(data, run.name, "learning_rate") == "0.002"


@pytest.mark.slow
@pytest.mark.cluster
def test_the_parameter_server_workers_add_up_to_the_run(ps_run):
    """The per-worker bars added up to 2,025 against a run of 1,599: validation's steps were counted too."""
    from tfdist.datasets import load_digits
    from tfdist.report.events import load_run

    run = load_run(str(ps_run))
    training_steps = math.ceil(int(0.8 * len(load_digits().images)) / BATCH)  # classifier.py's split
    for epoch in (0, 1):
        steps = [run.series("train", f"epoch_worker/{i}/steps").values[epoch] for i in (0, 1)]
        assert sum(steps) == training_steps, (epoch, steps)
    (throughput,) = _data(ps_run.parent).throughput
    assert throughput.per_worker_sum == pytest.approx(throughput.examples_per_second, rel=0.02)
    assert run.hparams["learning_rate"] == pytest.approx(LR)  # one replica in sync: not scaled


@pytest.mark.slow
def test_a_single_runs_page_has_no_empty_panel_and_its_results(single_run, tmp_path):
    """A single run's page had three empty or broken panels and a matplotlib UserWarning."""
    from tfdist.report.figures import left_out, panels

    logdir = _logdir(tmp_path, single_run)
    data = _data(logdir)
    titles = [title for title, _ in panels(data)]
    assert titles[:3] == ["Loss against wall-clock time", "Accuracy against wall-clock time",
                          "Examples per second per run"]
    assert "Examples per second per worker" not in titles and "Scaling efficiency against workers" not in titles
    assert {"Examples per second per worker", "Scaling efficiency against workers"} <= {t for t, _ in left_out(data)}
    _drawn_panels_have_ink(data)
    assert {"loss", "accuracy", "val_loss", "val_accuracy", "test loss", "test accuracy", "examples/s",
            "train time (s)", "time to val_accuracy>=0.9 (s)"} <= set(data.result_columns)
    assert all(_cell(data, single_run.name, c) for c in ("loss", "val_accuracy", "test accuracy", "examples/s"))
    page = _report(logdir, tmp_path / "report.html").read_text()
    assert "Not drawn: Scaling efficiency against workers: it needs runs whose hparams differ only in workers" in page
    assert '<th class="results">val_accuracy</th>' in page and '<th class="results">examples/s</th>' in page
    _report(logdir, tmp_path / "report.png")
    shot = screenshot((tmp_path / "report.html").as_uri(), tmp_path / "single.png", size=(1400, 2200))
    assert ink(shot) > 0.03


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.cluster
def test_the_demos_two_runs_one_colour_per_run_on_every_panel(horovod_run, ps_run, tmp_path):
    """Blue and orange meant workers in the per-worker panel and backends in the others."""
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure

    from tfdist.report.panels import colours, draw_per_worker, shade

    logdir = _logdir(tmp_path, horovod_run, ps_run)
    data = _data(logdir)
    run_colours = colours(data)
    assert len(set(run_colours.values())) == 2
    ax = Figure().add_subplot()
    draw_per_worker(ax, data)
    bars = [p for p in ax.patches]
    assert len(bars) == 4  # two workers a run
    for run, (first, second) in zip(data.runs, (bars[:2], bars[2:])):
        assert first.get_edgecolor() == second.get_edgecolor() == to_rgba(run_colours[run])
        assert first.get_facecolor() == pytest.approx(shade(run_colours[run], 0, 2))
        assert second.get_facecolor() == pytest.approx(shade(run_colours[run], 1, 2))
    assert sorted(t.get_text() for t in ax.texts) == ["w0", "w0", "w1", "w1"]
    assert "Not drawn: Scaling efficiency against workers" in _report(logdir, tmp_path / "report.html").read_text()
    _drawn_panels_have_ink(data)
    shot = screenshot((tmp_path / "report.html").as_uri(), tmp_path / "two.png", size=(1400, 2600))
    assert ink(shot) > 0.03


@pytest.mark.slow
def test_one_flipped_bit_in_any_record_of_a_real_event_file_is_found(single_run, tmp_path):
    """A bit-flipped event file was read as valid: records over 4 KiB that the report does not use (a
    graph, a histogram) had no checksum check (test_hostile.py flips one such graph). Here one bit of each
    record in turn of a real train/ event file (Keras' graph of this model is under 4 KiB)."""
    import random

    from tfdist.report.events import load_run

    (source,) = (single_run / "train").glob("events.out.tfevents.*")
    data = source.read_bytes()
    spans, at = [], 0
    while at + 12 <= len(data):
        length = int.from_bytes(data[at:at + 8], "little")
        spans.append((at, at + 12 + length + 4))
        at = spans[-1][1]
    assert len(spans) > 10
    rng = random.Random(34)
    for start, end in spans:
        byte = rng.randrange(start, end)
        run = tmp_path / f"flip-{start}"
        (run / "train").mkdir(parents=True)
        (run / "train" / source.name).write_bytes(data[:byte] + bytes([data[byte] ^ 1 << rng.randrange(8)])
                                                  + data[byte + 1:])
        problems = [str(p) for p in load_run(str(run)).problems]
        assert len(problems) == 1 and ("is damaged at byte" in problems[0]
                                       or "is not a TensorBoard event file" in problems[0]), (start, byte, problems)


def test_a_given_rate_that_is_not_the_trained_one_is_warned_and_both_are_recorded(tmp_path, caplog):
    """In one process: the record's learning_rate is read from the optimizer as training starts (0.004
    here, as if scaled by 4 replicas), and an ``lr`` hparam that says otherwise is named in a warning."""
    import numpy as np
    import tf_keras

    from tfdist.callbacks import TensorBoardRun
    from tfdist.report.events import load_run

    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(1)])
    model.compile(optimizer=tf_keras.optimizers.SGD(0.004), loss="mse")
    board = TensorBoardRun(str(tmp_path), run_name="r", is_chief=True, hparams={"lr": 0.001})
    x = np.zeros((8, 4), dtype="float32")
    with caplog.at_level("WARNING", logger="tfdist"):
        model.fit(x, x[:, :1], epochs=1, verbose=0, callbacks=[board])
    assert load_run(str(tmp_path / "r")).hparams["learning_rate"] == pytest.approx(0.004)
    assert load_run(str(tmp_path / "r")).hparams["lr"] == pytest.approx(0.001)
    assert [r.getMessage() for r in caplog.records] == [
        "TensorBoardRun: hparams['lr']=0.001 is not the rate the optimizer trains at, 0.004 (strategy.optimizer() "
        "scales the rate by the replicas); the run records learning_rate=0.004; fix: leave the rate out of "
        "`hparams` (TensorBoardRun records it)"]
