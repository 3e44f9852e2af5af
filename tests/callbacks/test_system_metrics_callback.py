"""SystemMetrics in real single-process fits, tf-keras and Keras 3: the tags read back from
``<run_dir>/system/<task>/``, the task names, and no thread or open writer left after fit, also
after a fit that raised."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402,F401
from tfdist.callbacks import TensorBoardRun  # noqa: E402
from tfdist.callbacks import system_metrics as callback_module  # noqa: E402
from tfdist.callbacks.system_metrics import SystemMetrics, task_name  # noqa: E402
from tfdist.errors import TfdistError  # noqa: E402

import support  # noqa: E402

FLAVOURS = ["tf_keras", "keras"]
TAGS = {"system/cpu_percent", "system/host_cpu_percent", "system/rss_mb", "system/net_sent_mbit_s",
        "system/net_recv_mbit_s"}


@pytest.fixture(params=FLAVOURS)
def K(request):
    return pytest.importorskip(request.param)


def _model(K):
    K.utils.set_random_seed(0)
    model = K.Sequential([K.Input((4,)), K.layers.Dense(8, activation="relu"), K.layers.Dense(1)])
    model.compile(optimizer=K.optimizers.SGD(0.01), loss="mse")
    return model


def _data(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 4)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


def _slow_epochs(K, seconds: float):
    """A callback that makes every epoch last at least ``seconds`` (so the fit spans whole seconds)."""
    class Slow(K.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            time.sleep(seconds)

    return Slow()


def _scalars(path) -> dict[str, list[tuple[int, float, float]]]:
    """``{tag: [(step, wall_time, value), ...]}`` of the scalars in the event files directly in ``path``."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={"tensors": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.wall_time, float(tf.make_ndarray(e.tensor_proto)))
                  for e in accumulator.Tensors(tag)]
            for tag in accumulator.Tags()["tensors"]}


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tfdist-system-metrics"]


def test_a_fit_writes_every_tag_into_the_tasks_folder_against_seconds(K, tmp_path):
    x, y = _data()
    metrics = SystemMetrics(str(tmp_path / "run"), interval_s=0.25)
    started = time.time()
    _model(K).fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[metrics, _slow_epochs(K, 0.8)])
    ended = time.time()
    assert metrics.log_dir == str(tmp_path / "run" / "system" / "single")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["system"]  # not the run's main folder
    scalars = _scalars(metrics.log_dir)
    assert set(scalars) == TAGS  # no GPU here: no GPU tags
    rss = scalars["system/rss_mb"]
    assert len(rss) >= 5  # one at the start, then every 0.25 s over >= 2.4 s (late ones are skipped)
    steps = [step for step, _, _ in rss]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] >= 2
    walls = [wall for _, wall, _ in rss]
    assert walls == sorted(walls) and started - 1 <= walls[0] and walls[-1] <= ended + 1
    assert all(step == pytest.approx(wall - walls[0], abs=1.0) for step, wall, _ in rss)
    assert all(50 < value < 100_000 for _, _, value in rss)  # a TensorFlow process: tens of MB at least
    assert all(value >= 0 for _, _, value in scalars["system/cpu_percent"])
    assert max(value for _, _, value in scalars["system/cpu_percent"]) > 0  # fit ran on this process
    assert all(0 <= value <= 100 for _, _, value in scalars["system/host_cpu_percent"])
    assert all(value >= 0 for tag in ("system/net_sent_mbit_s", "system/net_recv_mbit_s")
               for _, _, value in scalars[tag])
    assert len(scalars["system/cpu_percent"]) == len(rss) - 1  # rates need a previous reading
    assert not metrics.running and _sampler_threads() == []


def test_a_tensorboard_run_gives_the_run_directory(tmp_path):
    board = TensorBoardRun(str(tmp_path), run_name="r1")
    metrics = SystemMetrics(board, task="rank3")
    assert metrics.run_dir == str(tmp_path / "r1")
    import tf_keras

    x, y = _data()
    model = _model(tf_keras)
    model.fit(x, y, epochs=1, verbose=0, callbacks=[board, metrics])
    assert metrics.log_dir == str(tmp_path / "r1" / "system" / "rank3")
    assert "system/rss_mb" in _scalars(metrics.log_dir)
    assert (tmp_path / "r1" / "train").is_dir()  # TensorBoardRun wrote its own folders beside it


class Boom(Exception):
    pass


def _raise_in_epoch(K, epoch: int):
    class Raise(K.callbacks.Callback):
        def on_epoch_begin(self, e, logs=None):
            if e == epoch:
                raise Boom("failed in training")

    return Raise()


def test_after_a_fit_that_raised_close_or_the_with_block_ends_the_thread_and_keeps_the_samples(K, tmp_path):
    x, y = _data()
    metrics = SystemMetrics(str(tmp_path), interval_s=0.1, task="t")
    with pytest.raises(Boom):
        _model(K).fit(x, y, epochs=2, verbose=0, callbacks=[metrics, _raise_in_epoch(K, 1)])
    assert metrics.running  # neither Keras calls on_train_end when fit raises
    metrics.close()
    assert not metrics.running and _sampler_threads() == []
    assert _scalars(metrics.log_dir)["system/rss_mb"]  # flushed

    with pytest.raises(Boom):
        with SystemMetrics(str(tmp_path), interval_s=0.1, task="u") as scoped:
            _model(K).fit(x, y, epochs=2, verbose=0, callbacks=[scoped, _raise_in_epoch(K, 1)])
    assert not scoped.running and _sampler_threads() == []
    assert _scalars(scoped.log_dir)["system/rss_mb"]


def test_strategy_fit_that_raised_leaves_no_sampler_running(K, tmp_path):
    """strategy.fit stops the thread itself when fit raises: no close() or with block needed."""
    x, y = _data()
    strategy = tfdist.make_strategy("single")
    with strategy.scope():
        model = _model(K)
    metrics = SystemMetrics(str(tmp_path), interval_s=0.1, task="t")
    with pytest.raises(Boom):
        strategy.fit(model, x, y, epochs=2, verbose=0, callbacks=[metrics, _raise_in_epoch(K, 1)])
    assert not metrics.running and _sampler_threads() == []
    assert _scalars(metrics.log_dir)["system/rss_mb"]  # flushed


def test_the_next_fit_stops_a_sampler_left_running(tmp_path):
    import tf_keras as K

    x, y = _data()
    metrics = SystemMetrics(str(tmp_path), interval_s=0.1)
    with pytest.raises(Boom):
        _model(K).fit(x, y, epochs=2, verbose=0, callbacks=[metrics, _raise_in_epoch(K, 1)])
    first = metrics.sampler
    _model(K).fit(x, y, epochs=1, verbose=0, callbacks=[metrics])
    assert not first.running and not metrics.running and _sampler_threads() == []


def test_a_process_whose_fit_raised_exits_promptly_and_flushes_its_samples(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent(f"""
        import time
        import tfdist
        import numpy as np
        import tf_keras as K
        from tfdist.callbacks.system_metrics import SystemMetrics

        class Raise(K.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                time.sleep(0.5)
                raise RuntimeError("boom")

        model = K.Sequential([K.Input((4,)), K.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x = np.zeros((8, 4), "float32")
        model.fit(x, x[:, :1], epochs=2, verbose=0,
                  callbacks=[SystemMetrics({str(tmp_path)!r}, interval_s=0.1, task="t"), Raise()])
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=support.subprocess_env())
    assert done.returncode == 1 and "RuntimeError: boom" in done.stderr
    assert len(_scalars(tmp_path / "system" / "t")["system/rss_mb"]) >= 3  # flushed at exit


def _strategy(**fields):
    return SimpleNamespace(**{"kind": "x", "rank": 0, "num_workers": 1, **fields})


@pytest.mark.parametrize("strategy, name", [
    (_strategy(kind="horovod", rank=1, num_workers=2), "rank1"),
    (_strategy(kind="parameter_server", task_type="chief", task_index=0), "chief"),
    (_strategy(kind="parameter_server", task_type="worker", task_index=2), "worker2"),
    (_strategy(kind="parameter_server", task_type="ps", task_index=0), "ps0"),
    (_strategy(kind="multi_worker_mirrored", rank=1, num_workers=2), "worker1"),
    (_strategy(kind="single"), "single"),
    (_strategy(kind="mirrored"), "single"),
    (None, "single"),
])
def test_the_task_name_comes_from_the_strategy(monkeypatch, strategy, name):
    monkeypatch.setattr(callback_module, "current_strategy", lambda: strategy)
    monkeypatch.setattr(callback_module._runtime, "horovod", lambda: None)
    assert task_name() == name


def test_without_a_strategy_the_task_name_comes_from_horovod(monkeypatch):
    monkeypatch.setattr(callback_module, "current_strategy", lambda: None)
    monkeypatch.setattr(callback_module._runtime, "horovod", lambda: SimpleNamespace(rank=lambda: 3))
    assert task_name() == "rank3"


@pytest.mark.parametrize("kwargs, error, message", [
    ({"run_dir_or_board": 3}, TypeError,
     "`run_dir_or_board` must be a TensorBoardRun or a directory path, got int"),
    ({"run_dir_or_board": "r", "interval_s": 0.01}, ValueError, "`interval_s` must be a finite number"),
    ({"run_dir_or_board": "r", "task": "a/b"}, ValueError, "`task` must be a folder name, got 'a/b'"),
    ({"run_dir_or_board": "r", "task": ".."}, ValueError, "`task` must be a folder name, got '..'"),
    ({"run_dir_or_board": "r", "task": ""}, ValueError, "`task` must be a folder name, got ''"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, error, message):
    with pytest.raises(error) as raised:
        SystemMetrics(**kwargs)
    assert isinstance(raised.value, TfdistError)
    assert message in str(raised.value) and "; fix: " in str(raised.value)


# Under horovodrun: test_under_horovod_every_rank_writes_its_own_folder_of_the_run is in
# tests/strategies/test_horovod_metrics.py, the system part of that file's job (one job per Keras).

PS_SCRIPT = """
import json, os, sys, threading, time
import tfdist
import numpy as np
import tensorflow as tf
from tfdist.callbacks.system_metrics import SystemMetrics

strategy = tfdist.make_strategy("auto", chief_grace_seconds=5)   # only the chief gets past this line
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(0.01)), loss="mse")

class SlowEpochs(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(1.0)

x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
system = SystemMetrics(os.path.join(sys.argv[1], "run"), interval_s=0.5)
strategy.fit(model, x, x[:, :1], batch_size=32, epochs=2, verbose=0, callbacks=[system, SlowEpochs()])
with open(os.path.join(sys.argv[1], "chief.json"), "w") as f:
    json.dump({"log_dir": system.log_dir, "running": system.running}, f)
"""


@pytest.mark.cluster
def test_under_parameter_servers_the_chief_writes_its_own_folder(tmp_path):
    import json

    script = tmp_path / "ps_system_metrics.py"
    script.write_text(PS_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "tfdist", "launch", "--workers", "1", "--ps", "1", "--",
                           sys.executable, str(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=support.subprocess_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "chief.json").read_text())
    assert report == {"log_dir": str(tmp_path / "run" / "system" / "chief"), "running": False}
    assert sorted(p.name for p in (tmp_path / "run" / "system").iterdir()) == ["chief"]
    scalars = _scalars(tmp_path / "run" / "system" / "chief")
    assert set(scalars) == TAGS and scalars["system/rss_mb"][-1][0] >= 1
