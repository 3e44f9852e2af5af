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
    ("class_weight", r"^ArgumentValueError: strategy.fit of a Keras 3 model under parameter servers does not take "
                     r"class_weight; fix:"),
    ("batched_dataset", r"^ArgumentValueError: .* needs batch_size= with a dataset .*; fix: pass the dataset unbatched"),
])
def test_what_keras_3_fit_cannot_honour_is_refused_by_name(found, case, message):
    assert re.search(message, found["refusals"][case]), found["refusals"][case]
