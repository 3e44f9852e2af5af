"""The callbacks in one process: chief-only routing, warm-up arithmetic, throughput, TensorBoard."""
from __future__ import annotations

import re

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402
from tfdist.callbacks import (ChiefOnly, LearningRateScale, LearningRateWarmup, MetricAverage,  # noqa: E402
                              TensorBoardRun, Throughput, default_run_name, warmup_learning_rate)


class Recorder(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(f"epoch{epoch}")

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append("batch")


def _fit(callbacks, epochs=2, lr=0.1):
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
    return model, model.fit(x, x.sum(axis=1, keepdims=True), batch_size=16, epochs=epochs,
                            callbacks=callbacks, verbose=0)


def test_warmup_formula():
    assert warmup_learning_rate(0.4, 0.25, 2, epoch=0, batch=0, steps_per_epoch=10) == pytest.approx(0.1)
    assert warmup_learning_rate(0.4, 0.25, 2, epoch=1, batch=0, steps_per_epoch=10) == pytest.approx(0.25)
    assert warmup_learning_rate(0.4, 0.25, 2, epoch=5, batch=3, steps_per_epoch=10) == pytest.approx(0.4)


def test_chief_only_silences_non_chiefs_entirely():
    on_chief, elsewhere = Recorder(), Recorder()
    _fit([ChiefOnly(on_chief, is_chief=True), ChiefOnly(elsewhere, is_chief=False)])
    assert on_chief.calls.count("epoch1") == 1 and "batch" in on_chief.calls
    assert elsewhere.calls == []


def test_warmup_in_one_process_ramps_from_start_factor():
    rates = []
    probe = tf.keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: rates.append(float(model_ref[0].optimizer.learning_rate.numpy())))
    model_ref = []

    class Capture(tf.keras.callbacks.Callback):
        def set_model(self, model):
            super().set_model(model)
            model_ref.append(model)

    _fit([Capture(), LearningRateWarmup(warmup_epochs=1, start_factor=0.5), probe], epochs=2, lr=0.2)
    assert rates[:4] == pytest.approx([0.1, 0.125, 0.15, 0.175])
    assert rates[4:] == pytest.approx([0.2] * 4)


def test_lr_scale_multiplies_within_its_epochs():
    model, history = _fit([LearningRateScale(0.1, start_epoch=1)], epochs=2, lr=0.2)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.02)


def test_metric_average_is_a_no_op_outside_horovod():
    _, history = _fit([MetricAverage()])
    _, reference = _fit([])
    assert history.history["loss"] == reference.history["loss"]


def test_throughput_logs_rates_from_the_step_count():
    throughput = Throughput(batch_size=16, replicas=2, workers=2)
    _, history = _fit([throughput])
    steps = 64 // 16
    for rate, step_ms in zip(history.history["examples_per_second"], history.history["step_time_ms"]):
        assert rate == pytest.approx(steps * 16 * 2 / (steps * step_ms / 1000), rel=1e-6)
    assert history.history["examples_per_second_per_worker"][0] == pytest.approx(
        history.history["examples_per_second"][0] / 2)
    with pytest.raises(ValueError, match="`batch_size` must be a positive"):
        Throughput(0)


def test_tensorboard_run_writes_one_directory_per_run_with_hparams(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator

    strategy = tfdist.make_strategy("single")
    board = TensorBoardRun(str(tmp_path), strategy=strategy, batch_size=16, hparams={"lr": 0.1})
    assert re.fullmatch(r"single-1w-b16-\d{8}-\d{6}", board.run_name)
    _fit([strategy.throughput(16), board])
    run = tmp_path / board.run_name
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == ["train"]
    train = event_accumulator.EventAccumulator(str(run / "train"), size_guidance={"tensors": 0})
    train.Reload()
    assert {"epoch_loss", "epoch_examples_per_second", "epoch_step_time_ms"} <= set(train.Tags()["tensors"])
    top = event_accumulator.EventAccumulator(str(run))
    top.Reload()
    assert "_hparams_/session_start_info" in top.Tags()["tensors"]
    assert default_run_name("horovod", 4, None).startswith("horovod-4w-2")


def test_every_plan_of_an_adaptive_run_records_into_one_run(monkeypatch, tmp_path):
    """The plans of an adaptive run (each a job of its own, perhaps of another backend) write one
    TensorBoard run: the default name comes from the run folder, not the backend and the clock."""
    from types import SimpleNamespace

    from tfdist.plan import Plan
    from tfdist.run_channel import ADAPT_ENV

    folder = str(tmp_path / "tfdist-plans" / "plan-20261204-203000.run")
    monkeypatch.setenv(ADAPT_ENV, folder)
    plan = Plan(backend="horovod", variant="horovod", options={}, workers=2, ps=0, batch_size=64,
                predicted_examples_per_second=1.0, predicted_step_ms=1.0, bottleneck="compute", explanation="")
    names = {TensorBoardRun(str(tmp_path), strategy=SimpleNamespace(kind=kind, num_workers=workers,
                                                                    num_replicas_in_sync=workers, is_chief=True,
                                                                    plan=plan), batch_size=64).run_name
             for kind, workers in (("horovod", 2), ("parameter_server", 3))}
    assert names == {"auto-b64-plan-20261204-203000"}
    monkeypatch.delenv(ADAPT_ENV)
    assert default_run_name("horovod", 2, 64, None).startswith("horovod-2w-b64-2")


def test_tensorboard_run_writes_nothing_off_the_chief(tmp_path):
    _fit([TensorBoardRun(str(tmp_path), run_name="r", is_chief=False)])
    assert list(tmp_path.iterdir()) == []


def test_metric_average_has_batch_hooks_only_when_asked():
    """Keras refuses batch hooks under ParameterServerStrategy, so the plain callback has none."""
    from tfdist import upstream

    average = MetricAverage()
    assert not upstream.has_batch_hooks(average)
    average.batch_level = True
    assert upstream.has_batch_hooks(average) and average.batch_level
    average.batch_level = False
    assert not upstream.has_batch_hooks(average)


def test_callbacks_ask_the_strategy_not_the_environment(monkeypatch, tmp_path):
    """make_strategy("parameter_server", cluster=...) without TF_CONFIG: every task thought it was
    the chief, and a hand-built Throughput counted 1 replica under tf.distribute."""
    import os
    from unittest import mock

    from tfdist.runtime import state
    from tfdist.strategies.parameter_server import ParameterServerOptions, ParameterServerStrategy

    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "ps": ["127.0.0.1:4"]}
    with mock.patch.dict(os.environ, {}, clear=True):
        worker = ParameterServerStrategy(ParameterServerOptions(cluster=cluster, task_type="worker", task_index=1))
    monkeypatch.setattr(state, "_current", worker)
    assert ChiefOnly(Recorder()).is_chief is False
    board = TensorBoardRun(str(tmp_path), run_name="r")
    assert board.is_chief is False and board.callback.hparams["workers"] == 2
    import types

    monkeypatch.setattr(state, "_current", types.SimpleNamespace(num_replicas_in_sync=4, num_workers=2,
                                                                 is_chief=True))
    throughput, logs = Throughput(16), {}
    _fit([throughput, tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, epoch_logs: logs.update(epoch_logs))], epochs=1)
    assert logs["examples_per_second"] == pytest.approx(16 * 4 * 1000 / logs["step_time_ms"], rel=1e-6)
    assert logs["examples_per_second_per_worker"] == pytest.approx(logs["examples_per_second"] / 2, rel=1e-6)


@pytest.mark.parametrize("make_callback", [
    lambda bad: tf.keras.callbacks.TensorBoard(log_dir=str(bad / "logs")),
    lambda bad: tf.keras.callbacks.BackupAndRestore(str(bad / "backup")),
    lambda bad: tf.keras.callbacks.ModelCheckpoint(str(bad / "ckpt" / "m-{epoch}.h5")),
    lambda bad: tf.keras.callbacks.CSVLogger(str(bad / "log.csv")),
    lambda bad: TensorBoardRun(str(bad), run_name="r", is_chief=True),
])
def test_an_unwritable_output_path_fails_before_the_first_epoch(tmp_path, make_callback):
    """It used to surface after the first epoch (one epoch lost) or as a raw NotFoundError."""
    from unittest import mock
    import os

    from tfdist.errors import TfdistError

    bad = tmp_path / "a-file"  # root ignores permission bits, but nobody creates a directory under a file
    bad.write_text("not a directory")
    epochs: list[int] = []
    with mock.patch.dict(os.environ, {}, clear=True):
        strategy = tfdist.make_strategy("single")
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(0.1)), loss="mse")
    x = np.zeros((8, 3), "float32")
    with pytest.raises(TfdistError) as info:
        strategy.fit(model, x, x[:, :1], epochs=1, verbose=0, callbacks=[
            make_callback(bad), tf.keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, _: epochs.append(epoch))])
    assert epochs == []
    message = str(info.value)
    assert "cannot write to" in message and str(bad) in message and "(Not a directory)" in message
    assert "; fix: pick a directory" in message and "\n" not in message


def test_the_output_check_stops_at_keras_placeholders(tmp_path):
    from tfdist.strategies.outputs import check_writable, output_paths

    checkpoint = tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpt" / "{epoch:02d}" / "w.h5"))
    paths = output_paths([checkpoint])
    assert paths == [("ModelCheckpoint(filepath=...)", str(tmp_path / "ckpt"))]
    check_writable(paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"] and not list((tmp_path / "ckpt").iterdir())


def test_a_switching_chief_tells_the_launcher_it_left_before_fit_returns(tmp_path):
    """The launcher ends the old job once ``left-<E>.json`` is there. It is written when fit's callbacks
    end (this one comes last), not after ``fit`` returns: freeing fit's tf.data iterator stalled 30 s
    and more on the lab, and the switch waited for it. Written once; not by another task, nor without a switch."""
    from tfdist import run_channel
    from tfdist.callbacks.adaptive import AdaptiveEpochs, tell_left

    chief = AdaptiveEpochs(str(tmp_path), is_chief=True, variant="horovod", epochs=6)
    chief.on_train_end()
    assert not list(tmp_path.glob("left-*.json"))  # no switch: nothing to tell
    chief.switched_to, chief.switched_at = "parameter_server", 4
    chief.on_train_end()
    left = run_channel.read_json(run_channel.left_path(str(tmp_path), 4))
    assert left is not None and left["to"] == "parameter_server"
    (tmp_path / "left-4.json").unlink()
    tell_left(chief)  # end_if_switched's call after fit: already told
    assert not (tmp_path / "left-4.json").exists()
    other = AdaptiveEpochs(str(tmp_path), is_chief=False, variant="horovod", epochs=6)
    other.switched_to, other.switched_at = "parameter_server", 4
    other.on_train_end()
    assert not (tmp_path / "left-4.json").exists()
