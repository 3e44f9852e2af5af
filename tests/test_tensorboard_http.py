"""TensorBoard, started for real on a run of a real fit, serves back the runs, tags and values.

``tensorboard --logdir DIR --port FREE --host 127.0.0.1`` runs as a subprocess (its own process
group, stopped at the end with everything it started); the test reads the runs and scalars over
TensorBoard's HTTP API, as the browser does, compares them with the fit's History, and renders
the Scalars page in headless Chromium.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import pytest
from browser import ink, pixels_of, screenshot
from support import subprocess_env
from tfdist.callbacks import TensorBoardRun

import tfdist

pytestmark = pytest.mark.slow  # starts TensorBoard, which imports TensorFlow

RUN = "tb-http"
EPOCHS = 3
STARTUP_SECONDS = 120
TRAIN_RUN_COLOUR = (0x00, 0x77, 0xBB)  # TensorBoard's second run colour


def _fit(logdir: Path):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    strategy = tfdist.make_strategy("single")
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    board = TensorBoardRun(str(logdir), RUN, strategy=strategy, batch_size=16, hparams={"lr": 0.1})
    return model.fit(x, y, batch_size=16, epochs=EPOCHS, validation_data=(x[:16], y[:16]),
                     callbacks=[strategy.throughput(16), board], verbose=0).history


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(base: str, path: str, **query: str):
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _stop(process: subprocess.Popen) -> list[psutil.Process]:
    """Stop TensorBoard and what it started (its process group); returns the processes it had."""
    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)
    except ProcessLookupError:
        pass
    psutil.wait_procs(family, timeout=20)
    for leftover in (p for p in family if p.is_running()):
        leftover.kill()
    return family


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory):
    """``(base url, History.history, logdir)`` of a TensorBoard serving one fit's run."""
    logdir = tmp_path_factory.mktemp("runs")
    history = _fit(logdir)
    port = _free_port()
    binary = Path(sys.executable).parent / "tensorboard"
    process = subprocess.Popen([str(binary), "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=subprocess_env(),
                               start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"tensorboard exited {process.returncode}: {process.stdout.read().decode()[-2000:]}")
            try:
                tags = _get(base, "/data/plugin/scalars/tags")
                if f"{RUN}/validation" in tags and "epoch_loss" in tags.get(f"{RUN}/train", {}):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"tensorboard did not serve the run within {STARTUP_SECONDS} s")
            time.sleep(0.5)
        yield base, history, logdir
    finally:
        family = _stop(process)
        assert family and not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_runs_and_tags_are_served(tensorboard):
    base, _, _ = tensorboard
    runs = _get(base, "/data/runs")
    assert {RUN, f"{RUN}/train", f"{RUN}/validation"} <= set(runs)
    tags = _get(base, "/data/plugin/scalars/tags")
    assert {"epoch_loss", "epoch_examples_per_second", "epoch_step_time_ms"} <= set(tags[f"{RUN}/train"])
    assert "epoch_loss" in tags[f"{RUN}/validation"]


@pytest.mark.parametrize("run, tag, key", [
    (f"{RUN}/train", "epoch_loss", "loss"),
    (f"{RUN}/validation", "epoch_loss", "val_loss"),
    (f"{RUN}/train", "epoch_examples_per_second", "examples_per_second"),
])
def test_served_values_equal_the_fit_history(tensorboard, run, tag, key):
    base, history, _ = tensorboard
    points = _get(base, "/data/plugin/scalars/scalars", run=run, tag=tag)  # [[wall time, step, value], ...]
    assert [step for _, step, _ in points] == list(range(EPOCHS))
    assert [value for _, _, value in points] == pytest.approx(history[key], rel=1e-6)


def test_the_hparams_record_is_served(tensorboard):
    base, _, _ = tensorboard
    request = urllib.request.Request(f"{base}/data/plugin/hparams/experiment", method="POST",
                                     data=json.dumps({"experimentName": ""}).encode(),
                                     headers={"Content-Type": "application/json", "X-TensorBoard-Feature-Flags": "{}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        experiment = json.loads(response.read())
    names = {info["name"] for info in experiment["hparamInfos"]}
    assert {"strategy", "workers", "batch_size", "global_batch_size", "lr"} <= names


def test_the_scalars_page_renders_in_headless_chromium(tensorboard, tmp_path):
    base, _, _ = tensorboard
    shot = screenshot(f"{base}/#scalars", tmp_path / "tensorboard.png", size=(1400, 1000), wait_ms=15000)
    # TensorBoard colours the runs, in name order, from its palette: tb-http #ff7043, tb-http/train
    # #0077bb, ... The train curves are drawn in the charts' area (right of the run list, below the
    # tag filter) in #0077bb: about 650 such pixels; none on the "No scalar data was found" page.
    assert ink(shot) > 0.05
    assert pixels_of(shot, TRAIN_RUN_COLOUR, box=(360, 170, 1400, 1000)) > 200
