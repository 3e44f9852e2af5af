"""make_strategy in-process: registered set, option errors, single/mirrored training."""
from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402
from tfdist.strategies import UnknownStrategyError, available_strategies, option_names  # noqa: E402
from tfdist.strategies.horovod import HorovodLaunchError  # noqa: E402


def test_registered_strategies_are_pinned():
    assert available_strategies() == ["auto", "horovod", "mirrored", "multi_worker_mirrored",
                                      "parameter_server", "single"]


def test_unknown_strategy_name():
    with pytest.raises(UnknownStrategyError, match=r"fix: did you mean 'horovod'\?"):
        tfdist.make_strategy("horovd")


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(TypeError) as info:
        tfdist.make_strategy("single", scale_rl=False)
    assert "unknown option(s) 'scale_rl' (did you mean 'scale_lr'?)" in str(info.value)
    assert "single: scale_lr;" in str(info.value)
    assert "horovod: scale_lr, shard_data, compression," in str(info.value)


@pytest.mark.no_gpu
def test_auto_checks_every_option_against_its_owner_backend():
    """make_strategy("auto", compression="int8") on a single process used to be accepted."""
    with mock.patch.dict(os.environ, {}, clear=True):
        with pytest.raises(ValueError, match="`compression` must be 'none', 'fp16' or 'powersgd', got 'int8'"):
            tfdist.make_strategy("auto", compression="int8")
        with pytest.raises(ValueError, match="`shards` must be an integer >= 1, got 0"):
            tfdist.make_strategy("auto", shards=0)


def test_an_unknown_option_suggests_across_every_backend():
    """`shards` on single used to suggest `shard_data`: the real option lives in parameter_server."""
    with pytest.raises(TypeError) as info:
        tfdist.make_strategy("single", shard=2)
    assert "'shard' (did you mean 'shards'?)" in str(info.value)


def test_a_named_backend_refuses_another_backends_option():
    with pytest.raises(TypeError, match=r"strategy 'single' does not take 'warmup_epochs' \(an option of horovod\)"):
        tfdist.make_strategy("single", warmup_epochs=2)


@pytest.mark.no_gpu
def test_make_strategy_registers_the_strategy_the_callbacks_ask():
    with mock.patch.dict(os.environ, {}, clear=True):
        strategy = tfdist.make_strategy("single")
    assert tfdist.current_strategy() is strategy


@pytest.mark.no_gpu
def test_auto_ignores_options_of_other_backends_but_not_typos():
    with mock.patch.dict(os.environ, {}, clear=True):
        strategy = tfdist.make_strategy("auto", compression="fp16", warmup_epochs=2)
        assert strategy.kind == "single"
        with pytest.raises(TypeError, match="unknown option"):
            tfdist.make_strategy("auto", compresion="fp16")


def test_horovod_outside_horovodrun_says_how_to_launch():
    with mock.patch.dict(os.environ, {}, clear=True):
        with pytest.raises(HorovodLaunchError, match=r"horovodrun -np N python script.py"):
            tfdist.make_strategy("horovod")


def test_bad_option_values_name_the_option():
    with pytest.raises(ValueError, match="`compression` must be 'none', 'fp16' or 'powersgd'"):
        tfdist.make_strategy("horovod", compression="int8")
    assert "backward_passes_per_step" in option_names("horovod")


def _regression_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 4)).astype("float32")
    return x, (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32"))


@pytest.mark.parametrize("kind", ["single", "mirrored"])
def test_training_converges_with_in_process_backends(kind):
    strategy = tfdist.make_strategy(kind)
    assert strategy.kind == kind and strategy.is_chief and strategy.rank == 0
    assert strategy.tf_strategy is not None
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(0.1)), loss="mse")
    x, y = _regression_data()
    history = strategy.fit(model, x, y, batch_size=32, epochs=5, verbose=0)
    assert history.history["loss"][-1] < 0.05 * history.history["loss"][0]
    assert strategy.evaluate(model, x, y, batch_size=64, verbose=0) < 0.1


def test_uncompiled_model_and_string_optimizer_are_refused():
    strategy = tfdist.make_strategy("single")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="the model is not compiled"):
        strategy.fit(model, *_regression_data())
    with pytest.raises(TypeError, match="must be a tf-keras or Keras 3 optimizer instance"):
        strategy.optimizer("adam")


def test_lr_is_scaled_by_replicas_only_when_asked():
    from tfdist.strategies.single import SingleStrategy

    class TwoReplicas(SingleStrategy):
        lr_scale = 2.0

    strategy = TwoReplicas(SingleStrategy.Options())
    assert float(strategy.optimizer(tf.keras.optimizers.SGD(0.1)).learning_rate.numpy()) == pytest.approx(0.2)
    assert float(strategy.optimizer(tf.keras.optimizers.SGD(0.1), scale_lr=False).learning_rate.numpy()) \
        == pytest.approx(0.1)
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    with pytest.raises(TypeError, match="cannot scale a LearningRateSchedule.*fix: pass scale_lr=False"):
        strategy.optimizer(tf.keras.optimizers.SGD(schedule))
    strategy.optimizer(tf.keras.optimizers.SGD(schedule), scale_lr=False)


def test_multi_worker_mirrored_checks_tf_config_first():
    from tfdist.cluster import ClusterConfigError

    config = '{"cluster": {"worker": ["h:1", "h:1"]}, "task": {"type": "worker", "index": 3}}'
    with mock.patch.dict(os.environ, {"TF_CONFIG": config}, clear=True):
        with pytest.raises(ClusterConfigError, match=r"2 problems"):
            tfdist.make_strategy("auto")


def test_datasets_with_batch_size_are_batched_globally():
    strategy = tfdist.make_strategy("single")
    dataset = tf.data.Dataset.from_tensor_slices((np.zeros((10, 4), "float32"), np.zeros((10, 1), "float32")))
    x, _, kwargs = strategy._prepare_fit_inputs(dataset, None, {"batch_size": 4, "validation_data": dataset})
    assert "batch_size" not in kwargs
    assert [int(b[0].shape[0]) for b in x] == [4, 4, 2]
    assert int(kwargs["validation_data"].cardinality()) == 3


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_scale_lr_must_be_a_bool_on_every_backend(value):
    """`make_strategy("single", scale_lr="yes")` was accepted and used as a truth value."""
    from tfdist.strategies.multi_worker_mirrored import MultiWorkerMirroredOptions
    from tfdist.strategies.horovod import HorovodOptions
    from tfdist.strategies.parameter_server import ParameterServerOptions

    for options_type in (tfdist.strategies.StrategyOptions, HorovodOptions, ParameterServerOptions, MultiWorkerMirroredOptions):
        with pytest.raises(tfdist.strategies.OptionValueError, match=r"`scale_lr` must be True or False, got"):
            options_type(scale_lr=value)
