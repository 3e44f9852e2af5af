"""The custom loop's pure rules (tfdist.strategies.loop), without TensorFlow: the steps of an epoch, what the
loop refuses on which backend and Keras, and the ops ``reduce`` takes."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tfdist.errors import ArgumentValueError
from tfdist.strategies import loop


def test_the_rules_import_no_tensorflow():
    code = "import sys, tfdist.strategies.loop; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


@pytest.mark.parametrize("examples, batch, replicas, given, expected", [
    (1797, 32, 1, None, 56), (1797, 32, 2, None, 28), (1797, 16, 2, None, 56), (64, 32, 2, None, 1),
    (None, 32, 2, 7, 7), (10, 32, 2, 5, 5)])
def test_steps_per_epoch_is_the_examples_over_the_global_batch(examples, batch, replicas, given, expected):
    assert loop.steps_per_epoch(examples, batch, replicas, given) == expected


@pytest.mark.parametrize("examples, batch, given, message", [
    (None, 32, None, r"number of examples is not known .*; fix: pass steps_per_epoch=N"),
    (63, 32, None, r"63 examples, fewer than one global batch of 64 \(32 per replica x 2 replicas\); fix:"),
    (100, 0, None, r"`batch_size` must be an integer >= 1, got 0; fix:"),
    (100, True, None, r"`batch_size` must be an integer >= 1, got True"),
    (100, 8, 0, r"`steps_per_epoch` must be an integer >= 1, got 0; fix:")])
def test_steps_per_epoch_refuses_what_has_no_length(examples, batch, given, message):
    with pytest.raises(ArgumentValueError, match=message):
        loop.steps_per_epoch(examples, batch, 2, given)


def test_one_process_per_shard_takes_one_global_batch_per_step():
    """The sharding ``stream`` asks of tf.data, as arithmetic: process p of P takes elements p, p+P, ...
    of the repeated stream in batches of B; at step k the processes' batches are one process's batch k of P*B."""
    examples, batch, processes = 10, 3, 2
    repeated = [i % examples for i in range(200)]
    per_process = [repeated[p::processes] for p in range(processes)]
    for step in range(6):
        together = sorted(x for p in range(processes) for x in per_process[p][step * batch:(step + 1) * batch])
        one = sorted(repeated[step * batch * processes:(step + 1) * batch * processes])
        assert together == one


@pytest.mark.parametrize("backend, flavour, replicas, scaled, clipping, message", [
    ("parameter_server", "tf_keras", 1, True, (), r"LossScaleOptimizer .* one shared loss scale .*; fix: use mixed_bfloat16"),
    ("horovod", "tf_keras", 2, True, (), r"tf-keras LossScaleOptimizer .* would hang; fix: build the model with Keras 3"),
    ("multi_worker_mirrored", "tf_keras", 2, True, (), r"LossScaleOptimizer .* across workers yet .*; fix: use mixed_bfloat16"),
    ("mirrored", "keras_3", 2, True, (), r"Keras 3 LossScaleOptimizer over 2 replicas: .*; fix: use mixed_bfloat16"),
    ("mirrored", "keras_3", 2, False, ("clipnorm",), r"clips \(clipnorm\), and Keras 3 clips each of the 2 replicas"),
])
def test_the_loop_refuses_what_it_cannot_honour_naming_the_fix(backend, flavour, replicas, scaled, clipping, message):
    assert loop.loop_refusal(backend, flavour, replicas, scaled, clipping) is not None
    with pytest.raises(loop.LoopError, match=message):
        raise loop.LoopError(loop.loop_refusal(backend, flavour, replicas, scaled, clipping))


@pytest.mark.parametrize("backend, flavour, replicas, scaled, clipping", [
    ("single", "keras_3", 1, True, ("clipnorm",)), ("mirrored", "tf_keras", 2, True, ("clipnorm",)),
    ("horovod", "keras_3", 2, True, ("clipnorm",)), ("multi_worker_mirrored", "tf_keras", 2, False, ("clipnorm",)),
    ("mirrored", "keras_3", 1, True, ()), ("parameter_server", "tf_keras", 1, False, ("clipnorm",))])
def test_the_loop_takes_what_it_can_honour(backend, flavour, replicas, scaled, clipping):
    assert loop.loop_refusal(backend, flavour, replicas, scaled, clipping) is None


def test_reduce_takes_sum_and_mean_only():
    assert loop.check_reduce_op("SUM") == "sum" and loop.check_reduce_op("mean") == "mean"
    for op in ("max", None, 1):
        with pytest.raises(ArgumentValueError, match=r"`op` must be one of 'sum', 'mean', got .*; fix:"):
            loop.check_reduce_op(op)


def test_the_loop_calls_need_setup_first():
    with pytest.raises(loop.LoopError, match=r"strategy.minimize needs .* strategy.setup\(model, optimizer\) was not called; fix:"):
        loop.require_setup(None, "minimize")
