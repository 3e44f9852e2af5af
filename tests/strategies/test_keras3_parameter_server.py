"""Keras 3's ``strategy.fit`` and ``evaluate`` under parameter servers (issue 37, item 4), which Keras 3
alone cannot run (keras-team/keras#18624): tfdist runs them on its loop. One real cluster (2 workers, 1 ps)
runs tests/scripts/ps_keras3.py: the same model, data and seed with each Keras, and the refusals."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from support import SCRIPTS, subprocess_env

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def found(tmp_path_factory) -> dict:
    outdir = tmp_path_factory.mktemp("ps-keras3")
    command = [sys.executable, "-m", "tfdist", "launch", "--workers", "2", "--ps", "1", "--",
               sys.executable, str(SCRIPTS / "ps_keras3.py"), str(outdir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return json.loads((outdir / "ps_keras3.json").read_text())


def test_keras_3_fit_trains_on_the_parameter_servers_to_tf_keras_accuracy(found):
    assert (found["kind"], found["workers"]) == ("parameter_server", 2)
    keras_3, tf_keras = found["keras_3"], found["tf_keras"]
    assert keras_3["variables_on"] == ["/job:ps/replica:0/task:0/device:CPU:0"]  # placed on the ps, not local
    assert keras_3["epochs_seen"] == [0, 1, 2, 3]
    assert found["checkpoints"] == [f"k3-{epoch}.weights.h5" for epoch in (1, 2, 3, 4)]  # ModelCheckpoint, per epoch
    assert keras_3["iterations"] == 4 * (1797 // 32)  # every scheduled step counted once (an atomic add)
    history = keras_3["history"]
    assert sorted(history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert history["loss"] == sorted(history["loss"], reverse=True), history["loss"]
    assert keras_3["local_accuracy"] > 0.9 and tf_keras["local_accuracy"] > 0.9, found
    assert abs(keras_3["local_accuracy"] - tf_keras["local_accuracy"]) <= 0.02, found


def test_keras_3_evaluate_reads_the_ps_variables_exactly(found):
    """Evaluated on the coordinator, every example once: the accuracy a plain local copy of the weights
    gets (tf-keras' evaluate under parameter servers is an estimate over the workers' batches)."""
    keras_3 = found["keras_3"]
    assert sorted(keras_3["evaluate"]) == ["accuracy", "loss"]
    assert keras_3["evaluate"]["accuracy"] == pytest.approx(keras_3["local_accuracy"], abs=1e-6)


@pytest.mark.parametrize("case, message", [
    ("batch_hooks", r"^ArgumentValueError: callbacks\[0\] \(EveryBatch\) has batch hooks \(on_train_batch_end\).*; "
                    r"fix: use epoch-level callbacks"),
    ("backup", r"^ArgumentValueError: callbacks\[0\] is Keras 3's BackupAndRestore.*; fix: checkpoint a custom loop"),
    ("lambda_batch_hook", r"^ArgumentValueError: callbacks\[0\] \(LambdaCallback\) has batch hooks \(on_train_batch_end\)"),
    ("tensorboard", r"^ArgumentValueError: callbacks\[0\] \(TensorBoard\) has batch hooks .*tfdist.callbacks.TensorBoardRun "
                    r"in place of keras.callbacks.TensorBoard"),
    ("class_weight", r"^ArgumentValueError: strategy.fit of a Keras 3 model under parameter servers does not take "
                     r"class_weight; fix:"),
    ("batched_dataset", r"^ArgumentValueError: .* needs batch_size= with a dataset .*; fix: pass the dataset unbatched"),
])
def test_what_keras_3_fit_cannot_honour_is_refused_by_name(found, case, message):
    assert re.search(message, found["refusals"][case]), found["refusals"][case]


def test_the_workers_shards_of_shuffled_arrays_cover_every_example_once_an_epoch():
    """Each worker rebuilds fit's pipeline from its graph and takes every second element of the repeated
    stream: the shuffle must give every worker the same order, or the shards overlap and some examples
    are never seen. A seeded shuffle that reshuffles each epoch does not: its seeds come from a generator
    the rebuilt graph does not carry. fit gives each epoch a fixed seed of its own."""
    import numpy as np
    import tensorflow as tf

    from tfdist.strategies import keras3_parameter_server, loop

    ids = np.arange(200, dtype=np.int64)
    dataset, kwargs = keras3_parameter_server.fit_inputs(ids, ids, {"batch_size": 1})
    assert kwargs["steps_per_epoch"] == 200
    graph = tf.raw_ops.DatasetToGraphV2(input_dataset=tf.data.experimental.to_variant(dataset),
                                        external_state_policy=0, strip_device_assignment=True)

    def worker_epochs(index: int) -> list[int]:  # what loop.per_worker_stream's dataset_fn builds on a worker
        copy = tf.data.experimental.from_variant(tf.raw_ops.DatasetFromGraph(graph_def=graph), dataset.element_spec)
        return [int(x[0]) for x, _ in loop.stream(copy, 1, 2, index).take(200)]

    first, second = worker_epochs(0), worker_epochs(1)
    for epoch in (slice(0, 100), slice(100, 200)):
        assert sorted(first[epoch] + second[epoch]) == ids.tolist()
    assert first[:100] != first[100:] and first[:100] != sorted(first[:100])  # shuffled, another order each epoch


def test_a_loop_dataset_that_reshuffles_each_epoch_is_told_under_parameter_servers(caplog):
    """The same overlap in a custom loop's own dataset: distribute's per-worker stream warns about a shuffle
    that reshuffles each epoch (the default), and not about one with reshuffle_each_iteration=False."""
    import tensorflow as tf

    from tfdist.strategies import loop

    examples = tf.data.Dataset.range(64)
    for reshuffle, warned in ((True, True), (False, False)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="tfdist"):
            loop.per_worker_stream(examples.shuffle(64, seed=0, reshuffle_each_iteration=reshuffle), 8, 2)
        assert ("the workers' shards overlap" in caplog.text) is warned, caplog.text
        # the share the shards miss, as the Horovod and MultiWorkerMirrored warning words it (2 workers)
        assert ("about 25% of the examples an epoch are trained on by none of them" in caplog.text) is warned
    caplog.clear()
    with caplog.at_level("WARNING", logger="tfdist"):
        loop.per_worker_stream(examples.shuffle(64, seed=0), 8, 2, shard=False)  # each worker reads it whole
    assert "overlap" not in caplog.text
