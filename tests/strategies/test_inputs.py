"""tfdist.strategies.inputs: every backend's input rule, one test per option per backend."""
from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402
from tfdist.strategies import inputs  # noqa: E402


def _arrays(n: int = 10):
    x = np.arange(n * 2, dtype="float32").reshape(n, 2)
    return x, x[:, :1] * 10


def _count(dataset) -> int:
    return sum(int(tf.nest.flatten(element)[0].shape[0]) for element in dataset)


# --- Horovod ------------------------------------------------------------------------------------
def test_horovod_shards_arrays_by_stride_to_equal_length():
    x, y = _arrays(11)
    sx, sy, kwargs = inputs.horovod_fit_inputs(x, y, {"sample_weight": np.arange(11.0)}, 1, 2, shard=True)
    np.testing.assert_array_equal(sx, x[1::2][:5])
    np.testing.assert_array_equal(kwargs["sample_weight"], np.arange(11.0)[1::2][:5])
    assert len(sy) == 5


def test_horovod_shards_validation_tuples_and_datasets_alike():
    x, y = _arrays(8)
    _, _, kwargs = inputs.horovod_fit_inputs(x, y, {"validation_data": (x, y)}, 0, 2, shard=True)
    np.testing.assert_array_equal(kwargs["validation_data"][0], x[0::2])
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    sharded, _, kwargs = inputs.horovod_fit_inputs(dataset, None, {"batch_size": 2, "validation_data": dataset},
                                                   1, 2, shard=True)
    assert _count(sharded) == 4 and "batch_size" not in kwargs
    assert _count(kwargs["validation_data"]) == 4


def test_horovod_shard_data_false_leaves_every_input_alone():
    x, y = _arrays(8)
    sx, sy, kwargs = inputs.horovod_fit_inputs(x, y, {"validation_data": (x, y)}, 1, 2, shard=False)
    assert sx is x and sy is y and kwargs["validation_data"][0] is x


def test_horovod_refuses_datasets_whose_shards_could_differ_in_length():
    unknown = tf.data.Dataset.range(10).filter(lambda v: v > 2)
    with pytest.raises(inputs.InputError, match="cardinality of `x` is unknown.*fix: pass `steps_per_epoch`"):
        inputs.horovod_fit_inputs(unknown, None, {}, 0, 2, shard=True)
    repeated, _, kwargs = inputs.horovod_fit_inputs(unknown, None, {"steps_per_epoch": 3}, 0, 2, shard=True)
    assert kwargs["steps_per_epoch"] == 3


# --- tfdist's own array pipeline (Horovod) ---------------------------------------------------------
def _epoch(dataset) -> list:
    return [tuple(np.asarray(part) for part in element) for element in dataset]


def test_a_horovod_rank_trains_on_its_arrays_through_a_pipeline_without_autotuning():
    """Keras' own array pipeline autotunes, and freeing its iterator stalled ``fit`` up to a minute."""
    x, y = _arrays(11)
    weights = np.arange(11.0)
    sx, sy, kwargs = inputs.horovod_fit_inputs(x, y, {"sample_weight": weights, "batch_size": 2}, 1, 2, shard=True)
    pipeline, none, kwargs = inputs.array_fit_pipeline(sx, sy, kwargs)
    assert none is None and not {"batch_size", "sample_weight", "shuffle"} & set(kwargs)
    assert pipeline.options().autotune.enabled is False
    first, second = _epoch(pipeline), _epoch(pipeline)
    assert [len(batch[0]) for batch in first] == [2, 2, 1]  # Keras' cut: the last batch partial
    for epoch in (first, second):  # this rank's shard, every example once, weights kept with it
        seen = np.concatenate([batch[0] for batch in epoch])
        np.testing.assert_array_equal(np.sort(seen[:, 0]), np.sort(x[1::2][:5, 0]))
        for bx, by, bw in epoch:
            np.testing.assert_array_equal(by[:, 0], bx[:, 0] * 10)
            np.testing.assert_array_equal(bw, bx[:, 0] / 2)
    orders = {tuple(np.concatenate([b[0] for b in _epoch(pipeline)])[:, 0]) for _ in range(8)}
    assert len(orders) > 1  # a new order every epoch, as Keras' shuffle=True


def test_pipelines_shuffled_from_one_seed_agree_epoch_after_epoch_whatever_the_global_seed():
    """Each worker of multi-worker mirrored builds its own pipeline and keeps its share of each global
    batch: from the chief's seed their orders agree, each epoch anew, even where the workers' global
    seeds differ; another seed gives other orders."""
    x, y = _arrays(40)

    def epochs_of(seed, global_seed):
        tf.random.set_seed(global_seed)
        stream, none, kwargs = inputs.array_fit_pipeline(x, y, {"batch_size": 16, "epochs": 3}, seed=seed)
        assert none is None and kwargs == {"epochs": 3, "steps_per_epoch": 3}  # 16 + 16 + 8 a pass
        batches = [b[0][:, 0] for b in stream]
        assert [len(b) for b in batches] == [16, 16, 8] * 3  # Keras' cut, every epoch
        return [tuple(np.concatenate(batches[i:i + 3])) for i in (0, 3, 6)], stream

    first, stream = epochs_of(7, global_seed=0)
    assert epochs_of(7, global_seed=1)[0] == first and epochs_of(8, global_seed=0)[0] != first
    assert len(set(first)) == 3 and all(sorted(order) == sorted(x[:, 0]) for order in first)
    assert stream.options().autotune.enabled is False
    resumed, _, kwargs = inputs.array_fit_pipeline(x, y, {"batch_size": 16, "epochs": 3, "initial_epoch": 2},
                                                   seed=7)
    assert len(list(resumed)) == 3 and kwargs["steps_per_epoch"] == 3  # epoch 2 alone
    shared = inputs.by_batch_shares(stream)
    assert shared.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.DATA
    assert shared.options().autotune.enabled is False  # the pipeline's own options kept
    assert inputs.takes_array_pipeline(x, y, {"batch_size": 8})
    assert not inputs.takes_array_pipeline(x, y, {"steps_per_epoch": 2})
    assert not inputs.takes_array_pipeline(stream, None, {})
    unshuffled, _, kwargs = inputs.array_fit_pipeline(x, y, {"batch_size": 16, "shuffle": False}, seed=7)
    assert "steps_per_epoch" not in kwargs and np.concatenate([b[0] for b in unshuffled])[:, 0].tolist() == x[:, 0].tolist()


def test_the_array_pipeline_keeps_the_order_without_shuffle_and_batches_validation_alike():
    x, y = _arrays(6)
    pipeline, _, kwargs = inputs.array_fit_pipeline(
        x, y, {"batch_size": 4, "shuffle": False, "validation_data": (x[:5], y[:5])})
    np.testing.assert_array_equal(np.concatenate([b[0] for b in _epoch(pipeline)]), x)
    validation = kwargs["validation_data"]
    assert validation.options().autotune.enabled is False
    assert [len(b[0]) for b in _epoch(validation)] == [4, 1]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in _epoch(validation)]), y[:5])
    _, _, kwargs = inputs.array_fit_pipeline(x, y, {"batch_size": 4, "validation_batch_size": 5,
                                                    "validation_data": (x, y)})
    assert [len(b[0]) for b in _epoch(kwargs["validation_data"])] == [5, 1]
    features = {"a": x, "b": x[:, :1]}
    pipeline, _, _ = inputs.array_fit_pipeline(features, y, {"batch_size": 6})
    (batch_x, batch_y), = list(pipeline)
    assert set(batch_x) == {"a", "b"} and batch_y.shape == (6, 1)


def test_the_array_pipeline_casts_floating_arrays_to_the_models_floatx_as_keras_does():
    x64, labels = np.arange(12.0).reshape(6, 2), np.arange(6)
    assert x64.dtype == np.float64
    pipeline, _, _ = inputs.array_fit_pipeline(x64, labels, {"batch_size": 6})
    (batch_x, batch_y), = list(pipeline)
    assert batch_x.dtype == tf.float32 and batch_y.dtype == tf.int64
    half, _, _ = inputs.array_fit_pipeline(x64, labels, {"batch_size": 6}, floatx="float16")
    assert next(iter(half))[0].dtype == tf.float16


def test_keras_keeps_what_only_its_array_path_takes():
    x, y = _arrays(6)
    for kwargs in ({"validation_split": 0.5}, {"steps_per_epoch": 2}):
        same_x, _, same = inputs.array_fit_pipeline(x, y, dict(kwargs, batch_size=2))
        assert same_x is x and same["batch_size"] == 2
    listed, _, _ = inputs.array_fit_pipeline([x, x], y, {"batch_size": 2})  # inputs by position: Keras'
    assert isinstance(listed, list)
    for kwargs in ({"shuffle": "batch"}, {"sample_weight": np.ones(6)}):  # the latter without labels
        same_x, _, same = inputs.array_fit_pipeline(x, None, dict(kwargs, batch_size=2))
        assert same_x is x and same == dict(kwargs, batch_size=2)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
    assert inputs.array_fit_pipeline(dataset, None, {})[0] is dataset
    _, _, kwargs = inputs.array_fit_pipeline(x, y, {"batch_size": 3, "validation_data": [x, y]})
    assert kwargs["validation_batch_size"] == 3 and kwargs["validation_data"][0] is x  # not Keras' 32


# --- tf.distribute global batches ------------------------------------------------------------
def test_global_batches_multiply_the_per_replica_batch():
    x, y = _arrays(8)
    _, _, kwargs = inputs.global_batch_inputs(x, y, {"batch_size": 4}, replicas=3)
    assert kwargs["batch_size"] == 12
    _, _, kwargs = inputs.global_batch_inputs(x, y, {}, replicas=2)
    assert kwargs["batch_size"] == 2 * inputs.DEFAULT_BATCH_SIZE
    batched, _, kwargs = inputs.global_batch_inputs(tf.data.Dataset.from_tensor_slices((x, y)), None,
                                                    {"batch_size": 2}, replicas=2)
    assert [int(b[0].shape[0]) for b in batched] == [4, 4] and "batch_size" not in kwargs


def test_multi_worker_shard_data_false_turns_auto_sharding_off():
    x, y = _arrays(8)
    off = tf.data.experimental.AutoShardPolicy.OFF
    dataset, y_out, kwargs = inputs.global_batch_inputs(x, y, {"batch_size": 2}, replicas=2, shard=False)
    assert y_out is None and "batch_size" not in kwargs
    assert dataset.options().experimental_distribute.auto_shard_policy == off
    assert _count(dataset) == 8
    given = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    dataset, _, _ = inputs.global_batch_inputs(given, None, {}, replicas=2, shard=False)
    assert dataset.options().experimental_distribute.auto_shard_policy == off
    sharded, _, _ = inputs.global_batch_inputs(given, None, {}, replicas=2, shard=True)
    assert sharded.options().experimental_distribute.auto_shard_policy != off


# --- parameter servers -----------------------------------------------------------------------
def test_parameter_server_workers_read_all_the_arrays_when_told_not_to_shard():
    """With sharding on, each worker's shard is its worker index, read where the coordinator builds the
    worker's dataset: tests/strategies/test_parameter_server.py checks it on a real cluster."""
    x, y = _arrays(10)
    creator, _, kwargs = inputs.parameter_server_fit_inputs(x, y, {"batch_size": 5, "shuffle": False}, shard=False,
                                                            workers=2)
    assert kwargs["steps_per_epoch"] == 2
    worker_dataset = creator.dataset_fn(tf.distribute.InputContext())
    assert worker_dataset.options().autotune.enabled is False
    first_epoch = worker_dataset.take(2)
    seen = np.concatenate([batch[0].numpy()[:, 0] for batch in first_epoch])
    assert sorted(seen.tolist()) == sorted(x[:, 0].tolist())


# --- every backend takes or refuses shard_data --------------------------------------------------
@pytest.mark.parametrize("kind", ["single", "mirrored"])
def test_shard_data_is_refused_where_one_process_reads_everything(kind):
    with pytest.raises(TypeError, match=f"strategy '{kind}' does not take 'shard_data'"):
        tfdist.make_strategy(kind, shard_data=False)


@pytest.mark.no_gpu
def test_shard_data_is_an_option_of_the_multi_process_backends():
    from tfdist.strategies import option_names

    for kind in ("horovod", "multi_worker_mirrored", "parameter_server"):
        assert "shard_data" in option_names(kind)
    with mock.patch.dict(os.environ, {}, clear=True):
        assert tfdist.make_strategy("auto", shard_data=False).kind == "single"  # auto: another backend's


def test_horovod_shard_data_false_still_batches_a_dataset_given_with_batch_size():
    x, y = _arrays(8)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    batched, _, kwargs = inputs.horovod_fit_inputs(dataset, None, {"batch_size": 4, "validation_data": dataset},
                                                   1, 2, shard=False)
    assert [int(b[0].shape[0]) for b in batched] == [4, 4] and "batch_size" not in kwargs
    assert [int(b[0].shape[0]) for b in kwargs["validation_data"]] == [4, 4]


# --- a shuffle without a seed, in every process that shards its own copy ---------------------------
@pytest.fixture
def no_global_seed():
    """No global seed (an earlier test's would seed every shuffle), the one before put back after."""
    from tensorflow.python.eager import context

    before = context.global_seed()
    tf.random.set_seed(None)
    yield
    tf.random.set_seed(before)


def _two_processes_shards(make) -> list[set[int]]:
    """What two processes that each build ``make()`` and take their shard of it train on in one epoch
    (two builds in one process draw their unseeded shuffles' seeds apart, as two processes do)."""
    return [{int(v) for v in make().shard(2, index)} for index in range(2)]


def test_an_unseeded_shuffle_sharded_by_each_process_is_warned_of_and_a_seeded_one_is_not(caplog, no_global_seed):
    """Horovod's ranks and multi-worker mirrored's workers each build the user's pipeline and take
    their shard of it: without a seed, each shuffles in an order of its own, and the shards overlap."""
    unseeded = lambda: tf.data.Dataset.range(512).shuffle(512)  # noqa: E731
    seeded = lambda: tf.data.Dataset.range(512).shuffle(512, seed=7)  # noqa: E731
    tf.random.set_seed(3)  # a global seed seeds every shuffle: alike on every process that builds it alike
    assert not inputs.warn_unseeded_shuffle(unseeded(), 2, "fit")
    tf.random.set_seed(None)
    first, second = _two_processes_shards(unseeded)
    assert len(first | second) < 512 - 64  # about 128 of 512 trained on by neither
    first, second = _two_processes_shards(seeded)
    assert first | second == set(range(512)) and not first & second
    with caplog.at_level("WARNING", logger="tfdist"):
        assert inputs.warn_unseeded_shuffle(unseeded().batch(8), 2, "fit")
        assert not inputs.warn_unseeded_shuffle(unseeded(), 1, "fit")  # one process: nothing to overlap
        assert not inputs.warn_unseeded_shuffle(seeded().batch(8), 2, "loop")
        assert not inputs.warn_unseeded_shuffle(_arrays()[0], 2, "fit")
    warnings = [r.getMessage() for r in caplog.records if "without a seed" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("tfdist fit: the dataset is shuffled without a seed, "
                                                         "so each of the 2 processes"), warnings
    assert "about 25% of the examples an epoch are trained on by none of them" in warnings[0]
    assert "pass shuffle(..., seed=...)" in warnings[0]


def test_the_processes_that_shard_their_own_copy_are_horovods_ranks_and_multi_worker_workers(caplog, no_global_seed):
    from types import SimpleNamespace

    from tfdist.strategies.horovod import HorovodStrategy
    from tfdist.strategies.multi_worker_mirrored import MultiWorkerMirroredStrategy

    count = "_processes_sharding_their_own_copy"
    for shard, expected in ((True, 4), (False, 1)):
        options = SimpleNamespace(shard_data=shard)
        assert getattr(HorovodStrategy, count).fget(SimpleNamespace(size=4, options=options)) == expected
        assert getattr(MultiWorkerMirroredStrategy, count).fget(SimpleNamespace(num_workers=4, options=options)) \
            == expected
    strategy = tfdist.make_strategy("single")
    assert getattr(strategy, count) == 1
    with mock.patch.object(type(strategy), count, new_callable=mock.PropertyMock, return_value=2), \
            caplog.at_level("WARNING", logger="tfdist"):
        strategy.distribute(tf.data.Dataset.range(64).shuffle(64), batch_size=8)
    assert any(r.getMessage().startswith("tfdist loop: the dataset is shuffled without a seed")
               for r in caplog.records)
