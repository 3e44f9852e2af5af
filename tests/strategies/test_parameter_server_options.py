"""Parameter-server input checks and errors that need no cluster."""
from __future__ import annotations

import json
import os
from unittest import mock

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402
from tfdist.cluster import ClusterConfigError  # noqa: E402
from tfdist.strategies.parameter_server import (ParameterServerError, ParameterServerOptions,  # noqa: E402
                                                ParameterServerStrategy, _finite_eval_dataset)


def _bare_strategy(**options) -> ParameterServerStrategy:
    """A strategy object without a cluster behind it, for the input-handling methods."""
    strategy = ParameterServerStrategy.__new__(ParameterServerStrategy)
    strategy.options = ParameterServerOptions(**options)
    return strategy


def test_without_tf_config_the_error_says_how_to_launch():
    with mock.patch.dict(os.environ, {}, clear=True):
        with pytest.raises(ParameterServerError, match=r"TF_CONFIG is not set.*tfdist launch --workers 2 --ps 1"):
            tfdist.make_strategy("parameter_server")


def test_a_cluster_without_ps_tasks_is_refused():
    config = {"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "chief", "index": 0}}
    with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(config)}, clear=True):
        with pytest.raises(ParameterServerError, match="needs a chief, workers and ps tasks"):
            tfdist.make_strategy("parameter_server")


def test_an_invalid_tf_config_lists_every_problem():
    config = {"cluster": {"chief": ["h:1"], "worker": ["h:1"], "ps": ["h:99999"]}, "task": {"type": "chief", "index": 0}}
    with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(config)}, clear=True):
        with pytest.raises(ClusterConfigError) as info:
            tfdist.make_strategy("parameter_server")
    fields = [problem.field for problem in info.value.problems]
    assert any("worker" in f for f in fields) and any("ps" in f for f in fields)


def test_sharding_options_exclude_each_other():
    with pytest.raises(ValueError, match="either `shards` or `min_shard_bytes`"):
        ParameterServerOptions(shards=2, min_shard_bytes=1 << 20)
    with pytest.raises(ValueError, match="`shards` must be an integer >= 1"):
        ParameterServerOptions(shards=0)


def test_batch_level_callbacks_are_named_in_the_error():
    class PerBatch(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    with pytest.raises(ValueError, match=r"batch hooks: PerBatch; fix: use epoch-level callbacks"):
        _bare_strategy()._fit_callbacks([PerBatch(), tf.keras.callbacks.History()], {})


def test_unknown_length_datasets_need_steps_per_epoch():
    endless = tf.data.Dataset.from_tensors((np.zeros((2, 3)), np.zeros((2, 1)))).repeat()
    with pytest.raises(ValueError, match=r"fix: pass `steps_per_epoch=N`"):
        _bare_strategy()._prepare_fit_inputs(endless, None, {})
    dataset, _, kwargs = _bare_strategy()._prepare_fit_inputs(endless, None, {"steps_per_epoch": 5})
    assert kwargs["steps_per_epoch"] == 5


def test_arrays_get_steps_per_epoch_from_their_length():
    x, y = np.zeros((100, 3), "float32"), np.zeros((100, 1), "float32")
    data, _, kwargs = _bare_strategy()._prepare_fit_inputs(x, y, {"batch_size": 32})
    assert kwargs["steps_per_epoch"] == 4
    assert isinstance(data, tf.keras.utils.experimental.DatasetCreator)


def test_evaluation_data_is_repeated_with_a_step_count():
    dataset, steps = _finite_eval_dataset((np.zeros((70, 3)), np.zeros((70, 1))), 32, None, batch_datasets=False)
    assert steps == 3
    assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY


def test_a_batched_validation_dataset_is_not_batched_again_for_array_inputs():
    x, y = np.zeros((100, 3), "float32"), np.zeros((100, 1), "float32")
    validation = tf.data.Dataset.from_tensor_slices((x[:40], y[:40])).batch(8)
    _, _, kwargs = _bare_strategy()._prepare_fit_inputs(x, y, {"batch_size": 16, "validation_data": validation})
    assert kwargs["validation_steps"] == 5
    first_x, _ = next(iter(kwargs["validation_data"]))
    assert first_x.shape == (8, 3)
