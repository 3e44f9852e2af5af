"""Gradient accumulation with one allreduce per update (issue 22, item 5).

In-process: Keras 3 ``backward_passes_per_step=k`` becomes the optimizer's own
``gradient_accumulation_steps=k`` (or is refused naming the conflict). Under horovodrun
(tests/scripts/hvd_precision.py, one job per Keras, read by tests in test_mixed_precision.py):
gradients go over the wire once per k micro-steps, counted in Horovod's timeline, and 2 ranks x k
micro-steps of batch b equal one process with batch 2·k·b.
"""
from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
pytest.importorskip("horovod.tensorflow")

from tfdist.errors import ArgumentValueError  # noqa: E402


# --- in-process: the mapping and its refusals ---------------------------------------------------------
def test_keras_3_backward_passes_become_the_optimizers_gradient_accumulation_steps():
    import tfdist.horovod as hvd
    from tfdist.runtime.allreduce import ALLREDUCE_MARK

    optimizer = keras.optimizers.SGD(0.1)
    assert hvd.DistributedOptimizer(optimizer, backward_passes_per_step=3) is optimizer
    assert optimizer.gradient_accumulation_steps == 3
    assert getattr(optimizer, ALLREDUCE_MARK).backward_passes_per_step == 3
    assert "apply" not in vars(optimizer)  # the allreduce waits for the update, in _clip_gradients
    assert "_clip_gradients" in vars(optimizer)
    optimizer.build([keras.Variable(np.zeros(2, "float32"))])
    assert len(optimizer._accumulated_gradients) == 1  # Keras made the accumulators
    assert optimizer.get_config()["gradient_accumulation_steps"] == 3  # saved as the user's own setting

    own = keras.optimizers.SGD(0.1, gradient_accumulation_steps=2)
    assert hvd.DistributedOptimizer(own) is own and "_clip_gradients" in vars(own)


def test_conflicting_or_too_late_accumulation_is_refused_naming_the_fix():
    import tfdist.horovod as hvd

    with pytest.raises(ArgumentValueError, match=r"`backward_passes_per_step`=2, but the SGD already has "
                                                 r"gradient_accumulation_steps=3; fix: give one of them"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, gradient_accumulation_steps=3),
                                 backward_passes_per_step=2)
    built = keras.optimizers.SGD(0.1)
    built.build([keras.Variable(np.zeros(2, "float32"))])
    with pytest.raises(ArgumentValueError, match=r"`backward_passes_per_step`=2 needs gradient accumulators, "
                                                 r"and this SGD was built without them; fix: wrap the optimizer "
                                                 r"before compile/fit, or create it with gradient_accumulation_steps=2"):
        hvd.DistributedOptimizer(built, backward_passes_per_step=2)


# --- under horovodrun: tests/strategies/test_mixed_precision.py ------------------------------------------
# test_gradients_move_once_per_update and test_two_ranks_accumulating_two_steps_equal_one_process_with_
# four_times_the_batch read the hvd_precision.py job there, in the file that starts it: under xdist
# every file is its own unit, and two files sharing it could start it twice, once per worker.


def test_the_clip_gradients_accessor_pins_keras_3_and_fails_closed():
    from tfdist import upstream

    optimizer = keras.optimizers.SGD(0.1, clipnorm=1.0)
    assert upstream.clip_gradients(optimizer).__func__ is type(optimizer)._clip_gradients
    with pytest.raises(upstream.UpstreamChangedError, match=r"has no usable `_clip_gradients`"):
        upstream.clip_gradients(object())
