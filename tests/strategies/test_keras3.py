"""Keras 3 models in-process: the single and mirrored backends train them with tfdist's callbacks;
mixed Kerases are refused naming the argument. (parameter_server and multi_worker_mirrored train Keras 3
on real clusters: test_keras3_parameter_server.py, test_keras3_multi_worker.py.)"""
from __future__ import annotations

import re

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
tf_keras = pytest.importorskip("tf_keras")

import tfdist  # noqa: E402
from tfdist.callbacks import (ChiefOnly, LearningRateScale, LearningRateWarmup, MetricAverage,  # noqa: E402
                              TensorBoardRun, Throughput)
from tfdist.errors import ArgumentTypeError, ArgumentValueError  # noqa: E402
from tfdist.keras_compat import KerasFlavourError  # noqa: E402

BATCH, ROWS, EPOCHS = 16, 64, 3
STEPS = ROWS // BATCH


def _data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).normal(size=(ROWS, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def _model(package=keras):
    package.utils.set_random_seed(0)
    return package.Sequential([package.Input((3,)), package.layers.Dense(1)])


def _rate(model) -> float:
    return float(model.optimizer.learning_rate.numpy())


class Recorder(keras.callbacks.Callback):
    """A Keras 3 callback that lists the epochs it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[int] = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(epoch)


def _scalars(directory, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(directory), size_guidance={"tensors": 0})
    accumulator.Reload()
    return [(event.step, float(tf.make_ndarray(event.tensor_proto))) for event in accumulator.Tensors(tag)]


def _hparams(run_dir) -> dict:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    accumulator = event_accumulator.EventAccumulator(str(run_dir))
    accumulator.Reload()
    content = accumulator.SummaryMetadata("_hparams_/session_start_info").plugin_data.content
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
            for name, value in start.hparams.items()}


# --- single and mirrored train Keras 3 -----------------------------------------------------------------
@pytest.mark.no_gpu  # one replica: the per-batch rates below count 4 steps per epoch
@pytest.mark.parametrize("kind", ["single", "mirrored"])
def test_a_keras_3_model_trains_with_tfdist_callbacks(kind, tmp_path):
    strategy = tfdist.make_strategy(kind)
    with strategy.scope():
        model = _model()
        optimizer = keras.optimizers.SGD(0.2)
        assert strategy.optimizer(optimizer) is optimizer  # tf.distribute reduces inside the step: no wrapper
        model.compile(optimizer=optimizer, loss="mse")
    rates: list[float] = []
    probe = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: rates.append(_rate(model)))
    on_chief, elsewhere = Recorder(), Recorder()
    board = TensorBoardRun(str(tmp_path), strategy=strategy, batch_size=BATCH, hparams={"lr": 0.2})
    throughput = strategy.throughput(BATCH)
    x, y = _data()
    callbacks = [throughput, LearningRateWarmup(warmup_epochs=1, start_factor=0.5),
                 LearningRateScale(0.5, start_epoch=2), MetricAverage(), ChiefOnly(on_chief),
                 ChiefOnly(elsewhere, is_chief=False), board, probe]
    history = strategy.fit(model, x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                           callbacks=callbacks)

    # warm-up from 0.1 to 0.2 over epoch 0, 0.2 in epoch 1, scaled by 0.5 from epoch 2
    assert rates == pytest.approx([0.1, 0.125, 0.15, 0.175] + [0.2] * STEPS + [0.1] * STEPS)
    assert history.history["lr"] == pytest.approx([0.175, 0.2, 0.1])
    assert (on_chief.epochs, elsewhere.epochs) == ([0, 1, 2], [])
    for rate, step_ms in zip(history.history["examples_per_second"], history.history["step_time_ms"]):
        assert rate == pytest.approx(STEPS * BATCH / (STEPS * step_ms / 1000), rel=1e-6)
    assert history.history["examples_per_second_per_worker"] == history.history["examples_per_second"]
    assert len(throughput.history) == EPOCHS

    # the same rates in a plain Keras 3 fit give the same losses: tfdist changed only what it should
    reference = _model()
    reference.compile(optimizer=keras.optimizers.SGD(0.2), loss="mse")
    schedule = iter(rates)
    setter = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: setattr(
        reference.optimizer, "learning_rate", next(schedule)))
    expected = reference.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                             callbacks=[setter])
    assert history.history["loss"] == pytest.approx(expected.history["loss"], rel=1e-5)
    assert history.history["loss"][-1] < 0.1 * history.history["loss"][0]
    assert strategy.evaluate(model, x, y, batch_size=BATCH, verbose=0) == pytest.approx(
        reference.evaluate(x, y, batch_size=BATCH, verbose=0), rel=1e-5)

    # TensorBoardRun wrote with Keras 3's TensorBoard, into <logdir>/<run>/train, plus the hparams record
    assert isinstance(board.callback, keras.callbacks.TensorBoard)
    assert re.fullmatch(rf"{kind}-1w-b16-\d{{8}}-\d{{6}}", board.run_name)
    run = tmp_path / board.run_name
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == ["train"]
    assert _scalars(run / "train", "epoch_loss") == [
        (epoch, pytest.approx(loss)) for epoch, loss in enumerate(history.history["loss"])]
    assert [value for _, value in _scalars(run / "train", "epoch_lr")] == pytest.approx([0.175, 0.2, 0.1])
    assert _hparams(run) == {"strategy": kind, "workers": 1.0, "batch_size": 16.0, "global_batch_size": 16.0,
                             "lr": pytest.approx(0.2), "learning_rate": pytest.approx(0.2)}  # the rate fit started at


def test_a_keras_3_learning_rate_is_scaled_by_replicas():
    from tfdist.strategies.single import SingleStrategy

    class TwoReplicas(SingleStrategy):
        lr_scale = 2.0

    strategy = TwoReplicas(SingleStrategy.Options())
    optimizer = strategy.optimizer(keras.optimizers.SGD(0.1))
    assert float(optimizer.learning_rate.numpy()) == pytest.approx(0.2)
    with pytest.raises(ArgumentValueError, match="already scaled by strategy.optimizer"):
        strategy.optimizer(optimizer)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    with pytest.raises(ArgumentTypeError,
                       match="cannot scale a LearningRateSchedule.*fix: pass scale_lr=False"):
        strategy.optimizer(keras.optimizers.SGD(schedule))
    assert strategy.optimizer(keras.optimizers.SGD(schedule), scale_lr=False).learning_rate is not None


# --- mixed Kerases and wrong optimizers are refused ----------------------------------------------------
def _compiled(package):
    model = _model(package)
    model.compile(optimizer=package.optimizers.SGD(0.1), loss="mse")
    return model


@pytest.mark.parametrize("kind", ["single", "mirrored"])
def test_a_callback_of_the_other_keras_is_refused_naming_it(kind, tmp_path):
    strategy = tfdist.make_strategy(kind)
    with strategy.scope():
        model = _compiled(keras)
    weights = [w.copy() for w in model.get_weights()]
    x, y = _data()
    other_keras = tf_keras.callbacks.CSVLogger(str(tmp_path / "a"))
    with pytest.raises(KerasFlavourError, match=r"^`callbacks\[1\]` is a tf-keras object \(tf_keras\.src"
                                                r"\.callbacks\.CSVLogger\) but the model is Keras 3; .*fix: "
                                                r"build both with the same Keras \(`import keras` for this "
                                                r"model\)"):
        strategy.fit(model, x, y, callbacks=[Throughput(BATCH), other_keras])
    # seen through ChiefOnly
    with pytest.raises(KerasFlavourError, match=r"^`callbacks\[0\]` is a tf-keras object"):
        strategy.fit(model, x, y, callbacks=[ChiefOnly(tf_keras.callbacks.CSVLogger(str(tmp_path / "b")))])
    with pytest.raises(KerasFlavourError, match=r"^`callbacks\[0\]` is a tf-keras object"):
        strategy.evaluate(model, x, y, callbacks=[tf_keras.callbacks.History()])
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), weights))  # refused before training
    assert list(tmp_path.iterdir()) == []

    with strategy.scope():
        legacy_model = _compiled(tf_keras)
    with pytest.raises(KerasFlavourError, match=r"^`callbacks\[0\]` is a Keras 3 object .* but the model "
                                                r"is tf-keras; .*`import tf_keras` for this model"):
        strategy.fit(legacy_model, x, y, callbacks=[Recorder()])


def test_an_optimizer_of_the_other_keras_does_not_compile():
    """``strategy.optimizer`` does not know the model; Keras' compile refuses the mix itself."""
    strategy = tfdist.make_strategy("single")
    optimizer = strategy.optimizer(tf_keras.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match="Could not interpret optimizer identifier"):
        _model(keras).compile(optimizer=optimizer, loss="mse")


def test_legacy_and_string_optimizers_are_refused():
    strategy = tfdist.make_strategy("single")
    with pytest.raises(ArgumentTypeError, match=r"^`optimizer` is a legacy optimizer \(SGD\); fix: use "
                                                r"tf_keras\.optimizers\.SGD instead of "
                                                r"tf_keras\.optimizers\.legacy$"):
        strategy.optimizer(tf_keras.optimizers.legacy.SGD(0.1))
    with pytest.raises(ArgumentTypeError, match=r"^`optimizer` must be a tf-keras or Keras 3 optimizer "
                                                r"instance, got 'adam'; fix: pass e\.g\. "
                                                r"keras\.optimizers\.Adam\(1e-3\)"):
        strategy.optimizer("adam")
    with pytest.raises(ArgumentTypeError, match=r"must be a tf-keras or Keras 3 optimizer instance"):
        strategy.optimizer(keras.losses.MeanSquaredError())
