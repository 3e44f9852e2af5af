"""Changing Horovod's compression in a running process (issue 36: "a change that needs no new cluster
happens in-process"), one process: which optimizers can, and the refusal with the fix for those that
cannot. tests/strategies/test_adaptive_resume.py runs the change in real horovodrun jobs and reads the
allreduce's dtype from the traced step."""
from __future__ import annotations

import pytest

from tfdist.errors import TfdistError
from tfdist.runtime import allreduce

hvd = pytest.importorskip("horovod.tensorflow")


def settings(**extra) -> allreduce.AllreduceSettings:
    return allreduce.AllreduceSettings(op=hvd.Average, compression=hvd.Compression.none, **extra)


def test_keras_3_optimizer_takes_the_new_compression_at_its_next_trace():
    import keras

    optimizer = allreduce.distributed_optimizer(keras.optimizers.SGD(0.1), settings())
    assert allreduce.compression_change_problem(optimizer) is None
    allreduce.change_compression(optimizer, hvd.Compression.fp16)
    assert getattr(optimizer, allreduce.ALLREDUCE_MARK).compression is hvd.Compression.fp16


def test_tf_keras_loss_scale_optimizer_changes_the_horovod_wrapper_inside():
    import tf_keras

    wrapped = allreduce.distributed_optimizer(
        tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(0.1)), settings())
    inner = wrapped.inner_optimizer
    before = inner._allreduce_grads
    allreduce.change_compression(wrapped, hvd.Compression.fp16)
    assert getattr(inner, allreduce.ALLREDUCE_MARK).compression is hvd.Compression.fp16
    assert inner._allreduce_grads is not before


def test_an_optimizer_tfdist_did_not_wrap_or_that_accumulates_on_tf_keras_is_refused_with_the_fix():
    import tf_keras

    plain = tf_keras.optimizers.SGD(0.1)
    assert "not made by tfdist's strategy.optimizer" in allreduce.compression_change_problem(plain)
    with pytest.raises(TfdistError, match=r"cannot change the compression in this process: .*; fix: restart"):
        allreduce.change_compression(plain, hvd.Compression.fp16)
    accumulating = allreduce.distributed_optimizer(tf_keras.optimizers.SGD(0.1), settings(backward_passes_per_step=2))
    assert "backward_passes_per_step=2" in allreduce.compression_change_problem(accumulating)
    assert getattr(accumulating, allreduce.ALLREDUCE_MARK).compression is hvd.Compression.none
