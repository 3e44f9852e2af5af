"""Run metrics in one process, for tf-keras and Keras 3: wall time and the throughput summary,
time-to-accuracy targets and evaluate results in TensorBoardRun's record, read back from the
event files."""
from __future__ import annotations

import math

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tfdist.callbacks import ParameterServerMetrics, TensorBoardRun, Throughput, WorkerMetrics  # noqa: E402
from tfdist.callbacks.tensorboard import parse_targets  # noqa: E402
from tfdist.callbacks.worker_metrics import worker_logs  # noqa: E402
from tfdist.callbacks.ps_metrics import _in_thread, parameter_server_logs  # noqa: E402
from tfdist.errors import TfdistError  # noqa: E402

FLAVOURS = ["tf_keras", "keras"]


@pytest.fixture(params=FLAVOURS)
def K(request):
    return pytest.importorskip(request.param)


def _separable(n: int = 256) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    return x, (x[:, 0] + x[:, 1] > 0).astype("float32")[:, None]


def _classifier(K):
    K.utils.set_random_seed(0)
    model = K.Sequential([K.Input((4,)), K.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=K.optimizers.Adam(0.1), loss="binary_crossentropy", metrics=["accuracy"])
    return model


def _scalars(path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of the scalar summaries in the event files directly in ``path``."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={"tensors": 0})
    accumulator.Reload()
    return {tag: [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in accumulator.Tensors(tag)]
            for tag in accumulator.Tags()["tensors"]
            if accumulator.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"}


def test_throughput_adds_wall_time_and_a_summary_without_the_first_epoch(K):
    throughput = Throughput(16, replicas=1, workers=1)
    model = _classifier(K)
    history = model.fit(*_separable(), batch_size=16, epochs=3, verbose=0, callbacks=[throughput])
    wall = history.history["wall_time_s"]
    assert len(wall) == 3 and 0 < wall[0] < wall[1] < wall[2]
    rates = history.history["examples_per_second"]
    assert throughput.history == pytest.approx(rates)
    assert throughput.mean_examples_per_second == pytest.approx(np.mean(rates[1:]))
    assert throughput.mean_step_time_ms == pytest.approx(np.mean(history.history["step_time_ms"][1:]))
    assert Throughput(16, include_first_epoch=True)._summarised([1.0, 2.0]) == [1.0, 2.0]
    assert throughput._summarised([5.0]) == [5.0]  # one epoch: nothing else to report
    with pytest.raises(TfdistError, match="`include_first_epoch` must be True or False"):
        Throughput(16, include_first_epoch="yes")


def test_targets_record_the_first_wall_time_reached_and_the_ones_never_reached(K, tmp_path):
    x, y = _separable()
    board = TensorBoardRun(str(tmp_path), run_name="r", is_chief=True, targets={
        "accuracy": 0.9, "val_loss": ("<=", 0.3), "val_accuracy": 1.01})
    throughput = Throughput(16, replicas=1, workers=1)
    history = _classifier(K).fit(x, y, batch_size=16, epochs=6, validation_split=0.25, verbose=0,
                                 callbacks=[throughput, board])
    logged = history.history
    scalars = _scalars(tmp_path / "r")
    for tag, metric, reached in (("accuracy>=0.9", "accuracy", lambda v: v >= 0.9),
                                 ("val_loss<=0.3", "val_loss", lambda v: v <= 0.3)):
        first = next(i for i, value in enumerate(logged[metric]) if reached(value))
        assert scalars[f"time_to_target/{tag}"] == [(first + 1, pytest.approx(logged["wall_time_s"][first]))]
        assert scalars[f"target_reached/{tag}"] == [(first + 1, 1.0)]
        assert board.reached[tag] == pytest.approx(logged["wall_time_s"][first])
    (step, never), = scalars["time_to_target/val_accuracy>=1.01"]
    assert step == 6 and math.isnan(never)
    assert scalars["target_reached/val_accuracy>=1.01"] == [(6, 0.0)]
    assert scalars["train_time_s"] == [(6, pytest.approx(logged["wall_time_s"][-1]))]
    mean_rate = np.mean(logged["examples_per_second"][1:])  # the first epoch left out
    assert scalars["mean_examples_per_second"] == [(6, pytest.approx(mean_rate))]
    train = _scalars(tmp_path / "r" / "train")
    assert [v for _, v in train["epoch_wall_time_s"]] == pytest.approx(logged["wall_time_s"])


def test_evaluate_results_join_the_record_through_the_callback_or_the_method(K, tmp_path):
    x, y = _separable()
    board = TensorBoardRun(str(tmp_path), run_name="r", is_chief=True)
    model = _classifier(K)
    model.fit(x, y, batch_size=16, epochs=2, validation_split=0.25, verbose=0, callbacks=[board])
    # fit's validation is not an evaluate
    assert not any(tag.startswith("evaluate/") for tag in _scalars(tmp_path / "r"))
    results = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True, callbacks=[board])
    scalars = _scalars(tmp_path / "r")
    assert scalars["evaluate/accuracy"] == [(2, pytest.approx(results["accuracy"]))]
    assert scalars["evaluate/loss"] == [(2, pytest.approx(results["loss"]))]
    board.record_evaluation({"test_accuracy": 0.5})
    assert _scalars(tmp_path / "r")["evaluate/test_accuracy"] == [(2, 0.5)]
    with pytest.raises(TfdistError, match="`results` must be a dict"):
        board.record_evaluation([0.1, 0.9])


def test_the_record_shows_in_the_hparams_tab_as_metrics(tmp_path):
    """TensorBoard's HParams plugin takes every scalar of a session's folders as a metric column."""
    import tf_keras

    board = TensorBoardRun(str(tmp_path), run_name="r", is_chief=True, targets={"accuracy": 0.5})
    _classifier(tf_keras).fit(*_separable(), batch_size=16, epochs=2, verbose=0, callbacks=[board])
    from tensorboard.backend.event_processing import event_accumulator

    top = event_accumulator.EventAccumulator(str(tmp_path / "r"), size_guidance={"tensors": 0})
    top.Reload()
    assert "_hparams_/session_start_info" in top.Tags()["tensors"]
    assert {"time_to_target/accuracy>=0.5", "target_reached/accuracy>=0.5"} <= set(top.Tags()["tensors"])


@pytest.mark.parametrize("targets, message", [
    (["val_accuracy"], "`targets` must be a dict"),
    ({"val_accuracy": "high"}, "`targets['val_accuracy']` must be a finite number"),
    ({"val_accuracy": True}, "must be a finite number"),
    ({"val_loss": ("<", 0.1)}, "must be a threshold or ('>=' | '<=', threshold)"),
    ({"": 0.1}, "`targets` keys must be metric names"),
])
def test_bad_targets_are_refused_naming_targets(targets, message):
    with pytest.raises(TfdistError) as info:
        TensorBoardRun("unused", run_name="r", targets=targets)
    assert message in str(info.value) and "; fix: " in str(info.value)


def test_target_direction_follows_the_name_unless_given():
    assert parse_targets({"val_accuracy": 0.9, "val_loss": 0.2, "mae": ("<=", 1)}) == {
        "val_accuracy>=0.9": ("val_accuracy", ">=", 0.9), "val_loss<=0.2": ("val_loss", "<=", 0.2),
        "mae<=1": ("mae", "<=", 1.0)}


def test_worker_logs_show_the_straggler_in_the_spread():
    logs = worker_logs([[20.0, 9.0, 800.0], [20.0, 1.0, 800.0]])
    assert logs["worker/0/compute_time_ms"] == 11.0 and logs["worker/1/compute_time_ms"] == 19.0
    assert logs["worker_step_time_spread"] == pytest.approx(19 / 11)
    assert set(logs) == {f"worker/{r}/{k}" for r in (0, 1) for k in
                         ("step_time_ms", "examples_per_second", "comm_time_ms", "compute_time_ms")} | {
        "worker_step_time_spread"}
    measured = worker_logs([[20.0, 9.0, 800.0, 5.6e6, 8.1e8], [20.0, 1.0, 800.0, math.nan, 7.9e8]])
    assert (measured["worker/0/link_bytes_per_step"], measured["worker/0/peak_memory_mb"]) == (5.6e6, 810.0)
    assert math.isnan(measured["worker/1/link_bytes_per_step"]) and measured["worker/1/peak_memory_mb"] == 790.0


def test_the_modules_old_name_still_imports_worker_metrics():
    """callbacks/horovod_metrics.py became worker_metrics.py (it serves MultiWorkerMirrored too)."""
    from tfdist.callbacks import horovod_metrics

    assert (horovod_metrics.WorkerMetrics, horovod_metrics.worker_logs) == (WorkerMetrics, worker_logs)


def test_worker_metrics_refuses_to_run_outside_horovod():
    import tf_keras

    with pytest.raises(TfdistError, match="WorkerMetrics gathers figures from Horovod ranks"):
        _classifier(tf_keras).fit(*_separable(32), epochs=1, verbose=0, callbacks=[WorkerMetrics(16)])
    with pytest.raises(TfdistError, match="`batch_size` must be a positive integer"):
        WorkerMetrics(0)


def test_worker_metrics_times_a_step_and_leaves_an_xla_step_untimed(K):
    """The backend's own gather (MultiWorkerMirrored's, here one worker's row) in place of Horovod's. Under
    XLA, which has no kernel for tf.timestamp, the step trains untimed (the comm figures NaN) where it
    failed to compile; an adaptive MultiWorkerMirrored run adds WorkerMetrics by itself."""
    for jit in (False, True):
        model = _classifier(K)
        model.compile(optimizer=K.optimizers.Adam(0.1), loss="binary_crossentropy", jit_compile=jit)
        metrics = WorkerMetrics(16, gather=lambda row: [row])
        history = model.fit(*_separable(64), batch_size=16, epochs=2, verbose=0, callbacks=[metrics])
        comm = history.history["worker/0/comm_time_ms"]
        assert len(metrics.gathered) == 2 and all(rate > 0 for rate in history.history["worker/0/examples_per_second"])
        assert all(math.isnan(value) for value in comm) if jit else all(value > 0 for value in comm), (jit, comm)


def test_a_failed_fit_gives_the_optimizer_its_own_method_back(K):
    """Keras calls no on_train_end when fit raises: strategy.fit undoes WorkerMetrics' timing itself."""
    import tfdist

    class Fail(K.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("stopped on purpose")

    model = _classifier(K)
    with pytest.raises(RuntimeError, match="stopped on purpose"):
        tfdist.make_strategy("single").fit(model, *_separable(32), batch_size=16, epochs=1, verbose=0,
                                           callbacks=[WorkerMetrics(16, gather=lambda row: [row]), Fail()])
    assert not {"minimize", "apply"} & set(vars(model.optimizer)), sorted(vars(model.optimizer))


def test_parameter_server_share_is_what_compute_leaves_of_a_workers_step():
    # 2 workers stepping at once, 10 ms per step on the coordinator: each worker takes 20 ms a step
    assert parameter_server_logs(10.0, 5.0, 2) == {
        "coordinator_step_ms": 10.0, "local_compute_ms": 5.0, "non_compute_share": 0.75}
    # the workers were idle part of the time: shown, not hidden
    assert parameter_server_logs(10.0, 30.0, 2)["non_compute_share"] == -0.5


def test_the_local_compute_runs_outside_the_strategy_scope_fit_holds():
    """fit holds the strategy's scope; variables made there would live on the ps tasks."""
    import tf_keras

    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        inside = tf.Variable(1.0)
        outside = _in_thread(lambda: tf.Variable(1.0))
    assert type(inside).__name__ == "MirroredVariable"
    assert type(outside).__name__ == "ResourceVariable"
    metrics = ParameterServerMetrics(8, repeats=3)
    metrics.set_model(_classifier(tf_keras))
    metrics._step = _in_thread(metrics._build_local_step)
    assert _in_thread(metrics._time_local_step) > 0
    with pytest.raises(ZeroDivisionError):
        _in_thread(lambda: 1 / 0)  # errors come back to the caller


def test_parameter_server_metrics_refuses_other_backends_and_unknown_shapes():
    import tf_keras

    with pytest.raises(TfdistError, match="ParameterServerMetrics measures a parameter-server job"):
        _classifier(tf_keras).fit(*_separable(32), epochs=1, verbose=0,
                                  callbacks=[ParameterServerMetrics(16)])
    lazy = tf_keras.Sequential([tf_keras.layers.Dense(1)])
    metrics = ParameterServerMetrics(16)
    metrics.set_model(lazy)
    with pytest.raises(TfdistError, match="needs the model's input shape"):
        metrics._build_local_step()
    with pytest.raises(TfdistError, match="`repeats` must be a positive integer"):
        ParameterServerMetrics(16, repeats=0)


def test_parameter_server_metrics_that_fit_added_itself_measure_nothing_for_an_unknown_shape(caplog):
    """An adaptive run adds them on its own after a switch to parameter servers: a subclassed model
    (no input shape) must train on without per-worker figures, not fail the job it switched to."""
    import tf_keras

    lazy = tf_keras.Sequential([tf_keras.layers.Dense(1)])
    metrics = ParameterServerMetrics(16, optional=True)
    metrics.set_model(lazy)
    with caplog.at_level("WARNING", logger="tfdist"):
        assert metrics._local_step() is None
    assert "no per-worker figures for this parameter-server run" in caplog.text
    assert "needs the model's input shape" in caplog.text
    strict = ParameterServerMetrics(16)
    strict.set_model(lazy)
    with pytest.raises(TfdistError, match="needs the model's input shape"):
        strict._local_step()
