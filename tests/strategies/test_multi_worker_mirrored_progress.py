"""What a 2-worker MultiWorkerMirrored job prints mid-epoch: the job's loss and accuracy, not their
sum over the workers (tf-keras' fit reduces a step's per-replica metric values with SUM, and every
replica holds the job's value already), consistent with the epoch's line; for fit and evaluate."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from support import SCRIPTS, subprocess_env

STEPS = 16  # 512 examples, 16 per replica, 2 replicas
_BAR = re.compile(r"^\s*(?P<step>\d+)/(?P<steps>\d+) \[[=>.]*\] - (?P<rest>.*)$")
_VALUE = re.compile(r" - (loss|accuracy): ([0-9.]+)")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("mwms-progress")
    result = subprocess.run(
        [sys.executable, "-m", "tfdist", "launch", "--backend", "multi_worker_mirrored", "--workers", "2",
         "--", sys.executable, str(SCRIPTS / "mwms_progress.py"), str(outdir)],
        capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    workers = [json.loads((outdir / f"worker{rank}.json").read_text()) for rank in (0, 1)]
    return result.stdout, workers


def _bars(stdout: str) -> list[list[tuple[int, bool, dict[str, float]]]]:
    """The chief's progress bars: per bar (each epoch, then evaluate), its updates in order as
    ``(step, final, {"loss": .., "accuracy": ..})``; ``final`` is the line without an ETA."""
    bars: list[list] = []
    for raw in stdout.splitlines():
        # `tfdist launch` prefixes what starts a line; the bar's updates start with "\n" and end
        # without one, so they come unprefixed. Only the chief prints a bar (verbose=0 elsewhere).
        if raw.startswith("[") and not raw.startswith("[worker:0]"):
            continue
        for segment in re.split(r"[\r\x08]+", raw.removeprefix("[worker:0]")):
            match = _BAR.match(segment)
            if match is None:
                continue
            step, final = int(match["step"]), "ETA" not in match["rest"]
            if not bars or bars[-1][-1][1] or step < bars[-1][-1][0]:
                bars.append([])
            bars[-1].append((step, final, {k: float(v) for k, v in _VALUE.findall(match["rest"])}))
    return bars


@pytest.mark.cluster
def test_every_printed_mid_epoch_accuracy_is_a_fraction_and_the_last_step_matches_the_epoch(job):
    stdout, _ = job
    bars = _bars(stdout)
    assert len(bars) == 3, stdout[-3000:]  # two epochs, then evaluate
    for bar in bars:
        mid = [values for step, final, values in bar if not final]
        assert len(mid) == STEPS, bar  # every step printed (the script sleeps past the refresh interval)
        assert all(0.0 <= values["accuracy"] <= 1.0 for values in mid), bar
        (last_step, final, end) = bar[-1]
        assert final and last_step == STEPS
        for key in ("loss", "accuracy"):  # the last step's values are the epoch's, to the printed digit
            assert mid[-1][key] == pytest.approx(end[key], abs=1.5e-4), (key, bar)


@pytest.mark.cluster
def test_the_last_batch_logs_equal_the_epoch_logs_on_every_worker(job):
    """What every callback reads at on_train_batch_end, not only what the chief prints."""
    _, workers = job
    for worker in workers:
        for epoch, last in enumerate(worker["last_train_batch"]):
            for key in ("loss", "accuracy"):
                assert last[key] == pytest.approx(worker["history"][key][epoch], rel=1e-5), (key, epoch)
        for key in ("loss", "accuracy"):
            assert worker["last_test_batch"][key] == pytest.approx(worker["evaluate"][key], rel=1e-5), key


def test_only_tf_keras_own_steps_under_auto_reduction_switch_to_one_replicas_value():
    import keras
    import tf_keras

    from tfdist.strategies.multi_worker_mirrored import one_replicas_step_logs

    def model(K, cls=None):
        inputs = K.Input((2,))
        built = (cls or K.Model)(inputs, K.layers.Dense(1)(inputs))
        built.compile(optimizer="sgd", loss="mse")
        return built

    plain = model(tf_keras)
    plain.fit(np.zeros((4, 2)), np.zeros((4, 1)), verbose=0)  # traces a train function with "auto"
    one_replicas_step_logs(plain)
    assert plain.distribute_reduction_method == "first" and plain.train_function is None

    chosen = model(tf_keras)
    chosen.distribute_reduction_method = "sum"
    one_replicas_step_logs(chosen)
    assert chosen.distribute_reduction_method == "sum"

    class OwnStep(tf_keras.Model):
        def train_step(self, data):
            return super().train_step(data)

    custom = model(tf_keras, OwnStep)
    one_replicas_step_logs(custom)
    assert custom.distribute_reduction_method == "auto"  # its results may be parts that add up

    keras_3 = model(keras)
    one_replicas_step_logs(keras_3)  # refused by this backend elsewhere; left untouched here
    assert getattr(keras_3, "distribute_reduction_method", "auto") == "auto"
