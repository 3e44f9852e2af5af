"""PowerSGD's options on the two backends that take them (issue 38): one check
(``tfdist.strategies.powersgd_options``), the same messages on Horovod and MultiWorkerMirrored, and
what MultiWorkerMirrored refuses before any step (fp16, a Keras 3 optimizer, mixed_float16). In-process,
no cluster: a MultiWorkerMirroredStrategy without TF_CONFIG is one worker."""
from __future__ import annotations

import os
from unittest import mock

import pytest

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402
from tfdist.strategies.horovod import HorovodOptions  # noqa: E402
from tfdist.strategies.multi_worker_mirrored import MultiWorkerMirroredOptions  # noqa: E402
from tfdist.strategies.options import OptionValueError  # noqa: E402

BOTH = [HorovodOptions, MultiWorkerMirroredOptions]


@pytest.mark.parametrize("options", BOTH)
@pytest.mark.parametrize("kwargs, message", [
    ({"compression": "int8"}, "`compression` must be 'none', 'fp16' or 'powersgd', got 'int8'; fix: "),
    ({"compression": "powersgd", "powersgd_rank": 0}, "`powersgd_rank` must be an integer >= 1, got 0"),
    ({"compression": "powersgd", "powersgd_rank": 2.0}, "`powersgd_rank` must be an integer >= 1, got 2.0"),
    ({"compression": "powersgd", "powersgd_start_iter": -1}, "`powersgd_start_iter` must be an integer >= 0"),
    ({"compression": "powersgd", "powersgd_min_compression_rate": -0.5},
     "`powersgd_min_compression_rate` must be a number >= 0, got -0.5"),
    ({"powersgd_rank": 8}, "`powersgd_rank` is PowerSGD's, and `compression` is 'none'; fix: pass "
                           "compression='powersgd' as well, or drop powersgd_rank"),
])
def test_both_backends_refuse_the_same_values_with_the_same_message(options, kwargs, message):
    with pytest.raises(OptionValueError) as info:
        options(**kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize("options", BOTH)
def test_both_backends_take_powersgd_with_its_settings(options):
    built = options(compression="powersgd", powersgd_rank=2, powersgd_start_iter=0, powersgd_min_compression_rate=0)
    assert (built.powersgd_rank, built.powersgd_start_iter, built.powersgd_min_compression_rate) == (2, 0, 0)


@pytest.mark.no_gpu
def test_multi_worker_mirrored_refuses_fp16_and_says_what_to_use():
    assert MultiWorkerMirroredOptions(compression="fp16").compression == "fp16"  # auto hands it to horovod
    with mock.patch.dict(os.environ, {}, clear=True), pytest.raises(OptionValueError) as info:
        tfdist.make_strategy("multi_worker_mirrored", compression="fp16")
    message = str(info.value)
    assert message.startswith("`compression`='fp16' under multi_worker_mirrored"), message
    assert "fix: train with make_strategy('horovod', compression='fp16')" in message


@pytest.fixture(scope="module")
def one_worker():
    with mock.patch.dict(os.environ, {}, clear=True):
        return tfdist.make_strategy("multi_worker_mirrored", compression="powersgd")


@pytest.mark.no_gpu
def test_a_keras_3_optimizer_is_refused_naming_the_fix(one_worker):
    import keras

    with one_worker.scope():
        with pytest.raises(TypeError) as info:
            one_worker.optimizer(keras.optimizers.SGD(0.1))
    message = str(info.value)
    assert "`compression`='powersgd' under multi_worker_mirrored with a Keras 3 optimizer" in message
    assert "make_strategy('horovod', compression='powersgd')" in message


@pytest.mark.no_gpu
def test_mixed_float16_is_refused_when_the_optimizer_is_wrapped(one_worker):
    import tf_keras

    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with one_worker.scope(), pytest.raises(ValueError) as info:
            one_worker.optimizer(tf_keras.optimizers.SGD(0.1))
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    assert "compression='powersgd' under loss scaling" in str(info.value)
    assert "fix: train in float32 or mixed_bfloat16" in str(info.value)


@pytest.mark.no_gpu
def test_a_loss_scale_optimizer_around_it_is_refused_by_fit(one_worker):
    import numpy as np
    import tf_keras

    with one_worker.scope():
        model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(1)])
        inner = one_worker.optimizer(tf_keras.optimizers.SGD(0.1))
        model.compile(optimizer=tf_keras.mixed_precision.LossScaleOptimizer(inner), loss="mse")
    with pytest.raises(ValueError, match="compression='powersgd' under loss scaling"):
        one_worker.fit(model, np.zeros((8, 4), "float32"), np.zeros((8, 1), "float32"), batch_size=4, epochs=1)


@pytest.mark.no_gpu
def test_an_optimizer_is_wrapped_once(one_worker):
    import tf_keras

    with one_worker.scope():
        optimizer = one_worker.optimizer(tf_keras.optimizers.SGD(0.1), scale_lr=False)
        with pytest.raises(ValueError, match="already aggregates its gradients through PowerSGD"):
            one_worker.optimizer(optimizer, scale_lr=False)
