"""A custom loop drives Keras callbacks through ``strategy.callbacks`` (issue 37, item 5): tfdist's
run figures and TensorBoard runs, read back from the event files, on both Kerases; a plan's check
(``TFDIST_PLAN``) as after ``fit``; what only ``fit`` can drive is refused with the loop's way.
The multi-process loops (horovodrun, MultiWorkerMirrored) write their runs in the example's jobs."""
from __future__ import annotations

import json

import pytest

from tfdist.strategies.loop_callbacks import fit_only_refusal

EPOCHS = 3


def _keras(flavour: str):
    if flavour == "keras_3":
        import keras

        return keras
    import tf_keras

    return tf_keras


def _train(strategy, keras, callbacks):
    """The example's model in a loop of EPOCHS epochs at batch 32 driving ``strategy.callbacks``
    (tests/scripts/loop_example.py, which the cluster jobs run too): the logs each epoch's callbacks saw."""
    from scripts.loop_example import logged_loop

    return logged_loop(strategy, keras, EPOCHS, 32, 0.1, callbacks(strategy))


def _scalars(folder) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    found = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    found.Reload()
    return {tag: [float(tensor_util.make_ndarray(event.tensor_proto)) for event in found.Tensors(tag)]
            for tag in found.Tags()["tensors"] if not tag.startswith("_hparams_") and tag not in ("keras", "run")}


@pytest.mark.parametrize("flavour", ["tf_keras", "keras_3"])
def test_the_loops_figures_reach_its_tensorboard_run(flavour, tmp_path):
    import tfdist
    from tfdist.callbacks import TensorBoardRun

    strategy = tfdist.make_strategy("single")
    history = _train(strategy, _keras(flavour), lambda s: [*s.metrics(32), TensorBoardRun(
        str(tmp_path), strategy=s, batch_size=32, targets={"loss": ("<=", 100.0)})])
    assert all(entry["examples_per_second"] > 0 and entry["step_time_ms"] > 0 for entry in history), history
    (run,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    epochs, summary = _scalars(run / "train"), _scalars(run)
    assert len(epochs["epoch_loss"]) == EPOCHS and epochs["epoch_loss"] == pytest.approx(
        [entry["loss"] for entry in history], rel=1e-6)
    assert epochs["epoch_examples_per_second"] == pytest.approx([entry["examples_per_second"] for entry in history])
    assert summary["mean_examples_per_second"][-1] > 0 and summary["time_to_target/loss<=100"][-1] > 0
    assert "epoch_learning_rate" in epochs or flavour == "tf_keras"  # Keras 3's reads the loop's optimizer


def test_a_planned_loop_is_measured_against_its_plan(tmp_path, monkeypatch):
    import tf_keras

    import tfdist
    from tfdist.plan import PLAN_ENV, PLAN_RESULT_ENV

    plan = {"version": 1, "backend": "single", "variant": "single", "options": {}, "workers": 1, "ps": 0,
            "batch_size": 32, "predicted_examples_per_second": 1e9, "predicted_step_ms": 0.01,
            "bottleneck": "compute", "explanation": "a test's"}
    monkeypatch.setenv(PLAN_ENV, json.dumps(plan))
    monkeypatch.setenv(PLAN_RESULT_ENV, str(tmp_path / "result.json"))
    strategy = tfdist.make_strategy("auto")
    assert strategy.kind == "single" and strategy.plan is not None
    _train(strategy, tf_keras, lambda s: [])  # no Throughput given: the plan's check brings one
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["predicted_examples_per_second"] == 1e9 and 0 < result["measured_examples_per_second"] < 1e9, result


def test_what_only_fit_drives_is_refused_with_the_loops_way(tmp_path):
    import keras
    import tf_keras

    for backup in (tf_keras.callbacks.BackupAndRestore(str(tmp_path / "a")),
                   keras.callbacks.BackupAndRestore(str(tmp_path / "b"))):
        message = fit_only_refusal([tf_keras.callbacks.History(), backup])
        assert message is not None and message.startswith("`callbacks[1]` is a BackupAndRestore"), message
        assert "; fix: save and resume with strategy.checkpoint(directory)" in message
    assert fit_only_refusal([tf_keras.callbacks.EarlyStopping(), keras.callbacks.TensorBoard(str(tmp_path))]) is None


def test_bad_arguments_name_the_field_and_the_fix():
    import tensorflow as tf
    import tf_keras

    import tfdist

    strategy = tfdist.make_strategy("single")
    with pytest.raises(Exception, match=r"strategy.callbacks needs the model and optimizer of the loop.*; fix:"):
        strategy.callbacks([], None, 1)
    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
        optimizer = strategy.optimizer(tf_keras.optimizers.SGD(0.1))
    strategy.setup(model, optimizer)
    data = strategy.distribute(tf.data.Dataset.from_tensor_slices(tf.zeros((64, 2))), batch_size=8)
    with pytest.raises(TypeError, match=r"`callbacks` must be a list of Keras callbacks.*; fix:"):
        strategy.callbacks(tf_keras.callbacks.History(), data, 2)
    with pytest.raises(ValueError, match=r"`epochs` must be an integer >= 1, got 0; fix:"):
        strategy.callbacks([], data, 0)
    with pytest.raises(TypeError, match=r"`data` must be what strategy.distribute returned.*; fix:"):
        strategy.callbacks([], [1, 2], 2)
