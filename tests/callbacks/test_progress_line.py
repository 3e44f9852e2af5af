"""The progress line strategy.metrics ends with: Keras' own progress bar, minus the per-worker figures
the metric callbacks log (which still reach History and TensorBoard), for tf-keras and Keras 3; and
on a real parameter-server cluster, the printed line of `strategy.metrics(batch)` with and without
`show_workers=True`."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from support import SCRIPTS, subprocess_env

tf = pytest.importorskip("tensorflow")

from tfdist.callbacks import Throughput, progress_lines  # noqa: E402
from tfdist.callbacks.progress import _line_class  # noqa: E402
from tfdist.errors import TfdistError  # noqa: E402

FLAVOURS = ["tf_keras", "keras"]
FIGURES = {"worker/0/steps": 3.0, "worker/1/steps": 5.0, "worker_step_time_spread": 1.25}


@pytest.fixture(params=FLAVOURS)
def K(request):
    return pytest.importorskip(request.param)


def _figures(K):
    """A stand-in for WorkerMetrics / ParameterServerMetrics: per-worker keys into the epoch logs."""

    class Figures(K.callbacks.Callback):
        logged_keys = frozenset()

        def on_epoch_end(self, epoch, logs=None):
            logs.update(FIGURES)
            self.logged_keys = frozenset(FIGURES)

    return Figures()


def _later(K):
    """A callback after the progress line that adds a key, as ReduceLROnPlateau adds ``lr``."""

    class Later(K.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["later_key"] = 0.5

    return Later()


def _fit(K, callbacks, verbose=2, epochs=2):
    K.utils.set_random_seed(0)
    model = K.Sequential([K.Input((4,)), K.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=K.optimizers.Adam(0.1), loss="binary_crossentropy", metrics=["accuracy"])
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = (x[:, :1] > 0).astype("float32")
    history = model.fit(x, y, batch_size=16, epochs=epochs, validation_data=(x, y), verbose=verbose,
                        callbacks=callbacks)
    return model, history.history, (x, y)


def _epoch_lines(out: str) -> list[str]:
    """The epoch lines Keras printed: the last carriage-return segment of each line with a loss."""
    lines = [line.split("\r")[-1] for line in out.replace("\x08", "").split("\n")]
    return [line for line in lines if " loss: " in line and "ETA" not in line]


def test_the_line_keeps_loss_metrics_and_throughput_and_leaves_the_worker_figures_out(K, capsys):
    figures = _figures(K)
    _, history, _ = _fit(K, [Throughput(16, replicas=1, workers=1), figures, *progress_lines([figures]),
                             _later(K)])
    lines = _epoch_lines(capsys.readouterr().out)
    assert len(lines) == 2, lines
    for line in lines:
        for key in ("loss", "accuracy", "val_loss", "val_accuracy", "examples_per_second", "step_time_ms",
                    "later_key"):
            assert f" {key}: " in line, (key, line)
        assert "worker/" not in line and "worker_step_time_spread" not in line, line
    assert all(history[key] == [value, value] for key, value in FIGURES.items())  # the logs keep them


def test_the_line_is_keras_own_without_those_keys(K, capsys):
    """Same fit twice: Keras' bar prints the figures; the line prints the rest, in the same format."""
    _fit(K, [_figures(K), _later(K)])
    keras_lines = _epoch_lines(capsys.readouterr().out)
    figures = _figures(K)
    _fit(K, [figures, *progress_lines([figures]), _later(K)])
    lines = _epoch_lines(capsys.readouterr().out)
    assert all("worker/0/steps: 3.0000" in line for line in keras_lines)
    figures_text = re.compile(r" - (?:worker/\d+/steps|worker_step_time_spread): [0-9.]+")
    times = re.compile(r"\b\d+(?:us|ms|s)(?:/epoch|/step)?\b")  # the timings differ run to run
    assert [times.sub("T", figures_text.sub("", line)) for line in keras_lines] == [
        times.sub("T", line) for line in lines]


def test_verbose_1_shows_the_batches_and_an_evaluate_with_the_same_callbacks_prints_its_own(K, capsys):
    figures = _figures(K)
    callbacks = [figures, *progress_lines([figures])]
    model, _, (x, y) = _fit(K, callbacks, verbose=1, epochs=1)
    out = capsys.readouterr().out
    assert "1/4" in out  # the bar of the first batch: batch hooks reach Keras' bar
    assert "worker/" not in _epoch_lines(out)[-1]
    model.evaluate(x, y, batch_size=16, verbose=1, callbacks=callbacks)
    assert _epoch_lines(capsys.readouterr().out)  # a fresh bar for evaluate: not silenced by fit


def test_verbose_0_prints_nothing(K, capsys):
    figures = _figures(K)
    _fit(K, [figures, *progress_lines([figures])], verbose=0)
    assert " loss: " not in capsys.readouterr().out


def test_one_line_per_keras_imported_and_a_missing_keras_is_named():
    import keras  # noqa: F401  (both Kerases imported: one line each)
    import tf_keras

    figures = _figures(tf_keras)
    assert sorted(line.flavour for line in progress_lines([figures])) == ["keras_3", "tf_keras"]
    only_tf_keras = _line_class("tf_keras")([figures], ("tf_keras",))
    with pytest.raises(TfdistError, match="made before keras was imported.*; fix: import your Keras before"):
        _fit(keras, [only_tf_keras])
    with pytest.raises(TfdistError, match="`quiet` callbacks must say which keys they log"):
        progress_lines([Throughput(16)])


def test_metrics_adds_a_line_only_where_there_are_worker_figures_and_checks_show_workers():
    import tfdist

    strategy = tfdist.make_strategy("single")
    (throughput,) = strategy.metrics(16)
    assert isinstance(throughput, Throughput)
    assert [type(cb) for cb in strategy.metrics(16, show_workers=True)] == [Throughput]
    with pytest.raises(TfdistError, match="`show_workers` must be True or False, got 'yes'; fix: "):
        strategy.metrics(16, show_workers="yes")


# --- a real parameter-server cluster --------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("ps-progress")
    command = [sys.executable, "-m", "tfdist", "launch", "--workers", "2", "--ps", "1", "--",
               sys.executable, str(SCRIPTS / "ps_progress.py"), str(outdir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = json.loads((outdir / "chief.json").read_text())
    printed = result.stdout.split("=== show_workers\n")
    assert len(printed) == 2, result.stdout[-3000:]
    return {"default": (_epoch_lines(printed[0]), runs["default"]),
            "show_workers": (_epoch_lines(printed[1]), runs["show_workers"])}


@pytest.mark.cluster
def test_the_parameter_server_line_has_loss_accuracy_and_examples_per_second_and_no_worker_key(cluster_run):
    lines, history = cluster_run["default"]
    assert len(lines) == 2, lines
    for line in lines:
        for key in ("loss", "accuracy", "val_loss", "val_accuracy", "examples_per_second"):
            assert f" {key}: " in line, (key, line)
        assert "worker/" not in line and "coordinator_step_ms" not in line, line
    # ... while History (and so TensorBoardRun, which reads the same logs) has every figure
    assert {"worker/0/steps", "worker/1/step_time_ms", "worker_step_time_spread",
            "coordinator_step_ms"} <= set(history)


@pytest.mark.cluster
def test_show_workers_puts_the_per_worker_figures_on_the_line(cluster_run):
    (line,), _ = cluster_run["show_workers"]
    for key in ("loss", "accuracy", "examples_per_second", "worker/0/steps", "worker/1/step_time_ms",
                "worker_step_time_spread", "coordinator_step_ms"):
        assert f" {key}: " in line, (key, line)


@pytest.mark.cluster
def test_throughput_and_the_parameter_server_figures_time_the_same_epoch(cluster_run):
    """One clock: the coordinator's step time is Throughput's step time, to the last bit."""
    for run in ("default", "show_workers"):
        _, history = cluster_run[run]
        assert history["coordinator_step_ms"] == history["step_time_ms"]
