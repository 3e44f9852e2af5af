"""MultiWorkerMirroredStrategy with two real worker processes (`tfdist launch --backend multi_worker_mirrored`)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support import SCRIPTS, subprocess_env

pytestmark = pytest.mark.cluster


def test_two_workers_train_in_sync(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tfdist", "launch", "--backend", "multi_worker_mirrored", "--workers", "2", "--",
         sys.executable, str(SCRIPTS / "mwms_train.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-4000:]
    workers = [json.loads((tmp_path / f"worker{rank}.json").read_text()) for rank in (0, 1)]
    assert [(w["kind"], w["rank"], w["is_chief"], w["replicas"]) for w in workers] == [
        ("multi_worker_mirrored", 0, True, 2), ("multi_worker_mirrored", 1, False, 2)]
    for w0, w1 in zip(workers[0]["weights"], workers[1]["weights"]):
        np.testing.assert_allclose(np.array(w0), np.array(w1), rtol=1e-6)
    assert workers[0]["loss"] == workers[1]["loss"]
    assert workers[0]["loss"][-1] < 0.2 * workers[0]["loss"][0]
    assert "Epoch 1/4" in result.stdout and "[worker:1] Epoch" not in result.stdout  # progress on the chief only
    # each epoch the workers share out the examples: all once, none on both (Keras' own pipeline shuffled
    # each worker's copy of the arrays differently before tf.data's DATA sharding: they overlapped)
    for epoch, (mine, theirs) in enumerate(zip(workers[0]["seen"], workers[1]["seen"])):
        assert sorted(mine + theirs) == list(range(500)), f"epoch {epoch}: {len(set(mine) & set(theirs))} on both"
    assert workers[0]["seen"][0] != workers[0]["seen"][1]  # a new order each epoch
    # strategy.metrics: every worker's figures, gathered through the strategy's collectives (the same on both),
    # name worker 1, which sleeps in its forward pass, the straggler: worker 0 waits for it in the all-reduce
    figures, theirs = ({key: values for key, values in w["figures"].items() if key.startswith("worker")}
                       for w in workers)
    assert figures == theirs and figures, (figures, theirs)
    for epoch in range(1, 4):  # the first epoch holds each worker's tracing
        fast, slow = (figures[f"worker/{rank}/compute_time_ms"][epoch] for rank in (0, 1))
        waits = [figures[f"worker/{rank}/comm_time_ms"][epoch] for rank in (0, 1)]
        assert slow > fast > 0 and waits[0] > waits[1] > 0, (epoch, figures)
        assert figures["worker_step_time_spread"][epoch] > 1.2, figures
        # each worker's own peak memory (a TensorFlow process), gathered beside its timings
        assert all(figures[f"worker/{rank}/peak_memory_mb"][epoch] > 100 for rank in (0, 1)), figures


def test_workers_given_different_arrays_fail_at_once_naming_the_difference(tmp_path):
    """Each worker keeps its share of every global batch of the same arrays: a worker given other arrays
    would pair its steps with another epoch's (or hang at the end); both fail before training, with the fix."""
    script = tmp_path / "mismatch.py"
    script.write_text(
        "import tfdist\nimport numpy as np\nimport tensorflow as tf\n"
        "strategy = tfdist.make_strategy('multi_worker_mirrored')\n"
        "x = np.zeros((64 + 8 * strategy.rank, 4), 'float32')\n"
        "with strategy.scope():\n"
        "    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])\n"
        "    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(0.1)), loss='mse')\n"
        "strategy.fit(model, x, x[:, :1], batch_size=8, epochs=1, verbose=0)\n")
    result = subprocess.run(
        [sys.executable, "-m", "tfdist", "launch", "--backend", "multi_worker_mirrored", "--workers", "2", "--",
         sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=subprocess_env())
    output = result.stdout + result.stderr
    assert result.returncode != 0
    # the first worker to fail has said why (the launcher then stops the other, which may not get to say it)
    assert "InputError: the workers' fit inputs differ: the chief has 64 examples in arrays, " in output, output[-3000:]
    assert ("worker 1 has 72 examples in arrays" in output or "1 worker(s) have other inputs" in output)
    assert "fix: give every worker the same arrays" in output
