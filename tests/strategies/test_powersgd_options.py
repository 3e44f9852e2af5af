"""PowerSGD's options on the two backends that take them (issue 38): one check
(``tfdist.strategies.powersgd_options``), the same messages on Horovod and MultiWorkerMirrored, and
what MultiWorkerMirrored refuses before any step (fp16, a Keras 3 optimizer), and mixed_float16's loss
scale followed there. In-process, no cluster: a MultiWorkerMirroredStrategy without TF_CONFIG is one
worker."""
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
def test_an_optimizer_that_did_not_go_through_the_strategy_is_said_once_and_a_plans_powersgd_applied(
        one_worker, caplog, monkeypatch):
    """Compiled with a plain optimizer, fit trained on Keras' own whole-gradient aggregation without a
    word while the strategy said PowerSGD. The script's own compression is now said once, with the fix
    (evaluate says nothing: it aggregates no gradients); a plan's PowerSGD, which the script did not ask
    for (an adaptive run switches to it), is applied to the compiled optimizer."""
    import numpy as np
    import tf_keras

    from tfdist.plan import Plan
    from tfdist.runtime.allreduce import powersgd_state
    from tfdist.runtime.collective_powersgd import aggregates_through_powersgd

    def compiled():
        with one_worker.scope():
            model = tf_keras.Sequential([tf_keras.Input((16,)), tf_keras.layers.Dense(32), tf_keras.layers.Dense(1)])
            model.compile(optimizer=tf_keras.optimizers.SGD(0.05), loss="mse")
        return model

    x = np.random.default_rng(0).normal(size=(64, 16)).astype("float32")
    model = compiled()
    with caplog.at_level("WARNING", logger="tfdist"):
        for _ in range(2):
            one_worker.fit(model, x, x[:, :1], batch_size=16, epochs=1, verbose=0)
        one_worker.evaluate(model, x, x[:, :1], batch_size=16, verbose=0)
    said = [r.getMessage() for r in caplog.records if "did not go through strategy.optimizer()" in r.getMessage()]
    assert said == ["tfdist: `compression` is 'powersgd', but the model's optimizer (SGD) did not go through "
                    "strategy.optimizer(), so its gradients are averaged whole, without PowerSGD; fix: compile with "
                    "optimizer=strategy.optimizer(tf.keras.optimizers.Adam(...)) inside strategy.scope()"], said
    planned = Plan(backend="multi_worker_mirrored", variant="multi_worker_mirrored_powersgd",
                   options={"compression": "powersgd"}, workers=1, ps=0, batch_size=16,
                   predicted_examples_per_second=1e3, predicted_step_ms=16.0, bottleneck="network", explanation="")
    monkeypatch.setattr(one_worker, "plan", planned)
    model = compiled()
    caplog.clear()
    with caplog.at_level("WARNING", logger="tfdist"):
        one_worker.fit(model, x, x[:, :1], batch_size=16, epochs=1, verbose=0)
    assert "tfdist plan: the model's optimizer (SGD) did not go through strategy.optimizer(); the plan's PowerSGD " \
           "now aggregates its gradients" in caplog.text
    assert int(powersgd_state(model.optimizer).step.numpy()) == 4  # 64 examples, batch 16: every step through it
    # a legacy tf-keras optimizer aggregates where PowerSGD cannot go: it trains on whole gradients, said once
    with one_worker.scope():
        legacy = tf_keras.Sequential([tf_keras.Input((16,)), tf_keras.layers.Dense(1)])
        legacy.compile(optimizer=tf_keras.optimizers.legacy.SGD(0.05), loss="mse")
    caplog.clear()
    with caplog.at_level("WARNING", logger="tfdist"):
        for _ in range(2):
            one_worker.fit(legacy, x, x[:, :1], batch_size=16, epochs=1, verbose=0)
    said = [r.getMessage() for r in caplog.records if "legacy" in r.getMessage()]
    assert said == ["tfdist plan: the model's optimizer (SGD) did not go through strategy.optimizer(), and it is a "
                    "legacy tf-keras optimizer, which the plan's PowerSGD cannot go into, so its gradients are "
                    "averaged whole; fix: use tf_keras.optimizers.SGD instead of tf_keras.optimizers.legacy"], said
    assert not aggregates_through_powersgd(legacy.optimizer)


@pytest.mark.no_gpu
def test_a_keras_3_model_trains_through_powersgd_and_its_loss_scaling_is_refused(one_worker):
    """Keras 3's optimizer sums the replicas' gradients in ``_all_reduce_sum_gradients``, where PowerSGD
    goes (the two-worker job: tests/strategies/test_multi_worker_mirrored_powersgd.py). Its
    LossScaleOptimizer tests each worker's own gradients before the sum: refused, with the fix."""
    import keras
    import numpy as np

    from tfdist.runtime.allreduce import powersgd_state

    with one_worker.scope():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32), keras.layers.Dense(1)])
        model.compile(optimizer=one_worker.optimizer(keras.optimizers.SGD(0.05), scale_lr=False), loss="mse")
    x = np.random.default_rng(0).normal(size=(256, 16)).astype("float32")
    one_worker.fit(model, x, x[:, :1], batch_size=16, epochs=1, verbose=0)
    assert int(powersgd_state(model.optimizer).step.numpy()) == 16
    assert [s is not None for s in powersgd_state(model.optimizer).slots] == [True, False, False, False]
    with one_worker.scope(), pytest.raises(ValueError) as info:
        one_worker.optimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)))
    assert "with a Keras 3 LossScaleOptimizer" in str(info.value) and "fix: use mixed_bfloat16" in str(info.value)


@pytest.mark.no_gpu
def test_under_mixed_float16_powersgd_trains_on_and_its_state_survives_the_skipped_overflows(one_worker):
    """A tf-keras LossScaleOptimizer around the strategy's optimizer unscales the gradients before it
    aggregates them (unlike Horovod's allreduce, which sees them scaled), so PowerSGD's errors are in the
    gradient's units as they come (dividing them by the scale made them some 30,000 times smaller). The
    first steps, at a scale of 2**20, overflow float16 and are skipped: PowerSGD's state is kept finite."""
    import numpy as np
    import tf_keras

    from tfdist.runtime.allreduce import LOSS_SCALE_OF, powersgd_state

    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with one_worker.scope():
            model = tf_keras.Sequential([tf_keras.Input((16,)), tf_keras.layers.Dense(64, activation="relu"),
                                         tf_keras.layers.Dense(48, activation="relu"),
                                         tf_keras.layers.Dense(4, dtype="float32")])
            optimizer = one_worker.optimizer(tf_keras.optimizers.SGD(0.05), scale_lr=False)
            model.compile(optimizer=tf_keras.mixed_precision.LossScaleOptimizer(optimizer, initial_scale=2.0 ** 20),
                          loss="mse")
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(512, 16)).astype("float32"), rng.normal(size=(512, 4)).astype("float32")
        history = one_worker.fit(model, x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    assert getattr(optimizer, LOSS_SCALE_OF, None) is None  # nothing to divide by here
    state = powersgd_state(model.optimizer)
    assert int(state.step.numpy()) == 32
    assert float(model.optimizer.loss_scale.numpy()) < 2.0 ** 20  # overflows were skipped
    largest = max(float(np.max(np.abs(error.numpy()))) for error in state.errors)
    assert 1e-2 < largest < 10.0, largest
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.no_gpu
def test_an_optimizer_is_wrapped_once(one_worker):
    import tf_keras

    with one_worker.scope():
        optimizer = one_worker.optimizer(tf_keras.optimizers.SGD(0.1), scale_lr=False)
        with pytest.raises(ValueError, match="already aggregates its gradients through PowerSGD"):
            one_worker.optimizer(optimizer, scale_lr=False)
