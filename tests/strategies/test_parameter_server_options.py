"""Parameter-server input checks and errors that need no cluster."""
from __future__ import annotations

import json
import os
from unittest import mock

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tfdist  # noqa: E402
from tfdist import lifecycle  # noqa: E402
from tfdist.cluster import ClusterConfigError  # noqa: E402
from tfdist.strategies.inputs import finite_eval_dataset  # noqa: E402
from tfdist.strategies.parameter_server import (ParameterServerError, ParameterServerOptions,  # noqa: E402
                                                ParameterServerStrategy)

CLUSTER = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}


def _bare_strategy(**options) -> ParameterServerStrategy:
    """A worker task's strategy: constructing it starts no server (that is take_role's job), so
    the input-handling methods can be called without a cluster."""
    return ParameterServerStrategy(ParameterServerOptions(cluster=CLUSTER, task_type="worker", **options))


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
    dataset, steps = finite_eval_dataset((np.zeros((70, 3)), np.zeros((70, 1))), 32, None, batch_datasets=False)
    assert steps == 3
    assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY


def test_a_batched_validation_dataset_is_not_batched_again_for_array_inputs():
    x, y = np.zeros((100, 3), "float32"), np.zeros((100, 1), "float32")
    validation = tf.data.Dataset.from_tensor_slices((x[:40], y[:40])).batch(8)
    _, _, kwargs = _bare_strategy()._prepare_fit_inputs(x, y, {"batch_size": 16, "validation_data": validation})
    assert kwargs["validation_steps"] == 5
    first_x, _ = next(iter(kwargs["validation_data"]))
    assert first_x.shape == (8, 3)


def test_a_cluster_spec_or_resolver_is_accepted_as_cluster():
    spec = tf.train.ClusterSpec(CLUSTER)
    by_spec = ParameterServerStrategy(ParameterServerOptions(cluster=spec, task_type="ps", task_index=0))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="worker", task_id=0)
    by_resolver = ParameterServerStrategy(ParameterServerOptions(cluster=resolver))
    assert (by_spec.task_type, by_spec.num_workers, by_spec.num_ps) == ("ps", 1, 1)
    assert (by_resolver.task_type, by_resolver.task_index, by_resolver.chief_address) == ("worker", 0, "127.0.0.1:1")


def test_a_resolver_and_an_explicit_task_must_agree():
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(CLUSTER), task_type="worker", task_id=0)
    with pytest.raises(ValueError, match=r"`task_type`='ps' contradicts the cluster resolver's 'worker'"):
        ParameterServerStrategy(ParameterServerOptions(cluster=resolver, task_type="ps"))


def test_a_task_without_a_cluster_is_refused():
    with pytest.raises(ValueError, match="`task_type`/`task_index` were given without `cluster`"):
        ParameterServerOptions(task_type="worker")
    with pytest.raises(ValueError, match="`cluster` must be a dict of task lists, a tf.train.ClusterSpec"):
        ParameterServerOptions(cluster=["127.0.0.1:1"], task_type="worker")


def test_take_role_serves_then_exits_through_the_injected_exit(monkeypatch):
    """A worker task's lifecycle, without a server or a chief: the exit is injected."""
    from tfdist import lifecycle

    started, codes = [], []
    monkeypatch.setattr(tf.distribute, "Server", lambda *args, **kwargs: started.append(kwargs["job_name"]))
    monkeypatch.setattr(lifecycle, "wait_for_chief_to_finish", lambda *args: True)
    with mock.patch.dict(os.environ, {}, clear=True):
        _bare_strategy().take_role(exit=codes.append)
        assert os.environ["GRPC_FAIL_FAST"] == "use_caller"  # before the server's first channel
        assert "grpc.keepalive_time_ms=" in os.environ["TF_GRPC_DEFAULT_OPTIONS"]  # a cut link is noticed
    assert started == ["worker"] and codes == [0]


def test_a_task_keeps_the_users_grpc_options_and_gets_keepalive_merged_in(monkeypatch):
    from tfdist import lifecycle

    monkeypatch.setattr(tf.distribute, "Server", lambda *args, **kwargs: None)
    monkeypatch.setattr(lifecycle, "wait_for_chief_to_finish", lambda *args: True)
    user = {"GRPC_FAIL_FAST": "false", "TF_GRPC_DEFAULT_OPTIONS": "grpc.keepalive_time_ms=60000,grpc.x=1"}
    with mock.patch.dict(os.environ, user, clear=True):
        _bare_strategy().take_role(exit=lambda code: None)
        assert os.environ["GRPC_FAIL_FAST"] == "false"  # the user's explicit choice
        assert os.environ["TF_GRPC_DEFAULT_OPTIONS"] == (
            "grpc.keepalive_time_ms=60000,grpc.x=1,grpc.keepalive_timeout_ms=10000")


def _listening_socket():
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server, f"127.0.0.1:{server.getsockname()[1]}"


def test_a_lost_ps_is_named_by_probing_not_by_the_first_job_in_tensorflows_text():
    """The error used to take the first `/job:` of TensorFlow's text: `lost chief:0` when ps:0 died."""
    worker_socket, worker_address = _listening_socket()
    with worker_socket:
        cluster = {"chief": ["127.0.0.1:1"], "worker": [worker_address], "ps": ["127.0.0.1:3"]}  # ps:0 is gone
        strategy = ParameterServerStrategy(ParameterServerOptions(cluster=cluster, task_type="worker"))
        text = ("Socket closed\n/job:chief/replica:0/task:0 ... while talking to /job:worker/replica:0/task:0\n"
                + "\n".join(f"frame {i}" for i in range(150)))
        error = strategy._lost_task_error(tf.errors.UnavailableError(None, None, text))
    message = str(error)
    assert message.startswith("the parameter-server job lost ps:0, which holds variables")
    assert "chief" not in message and "\n" not in message
    assert "; fix: restart the whole cluster" in message
    assert len(error.__notes__[0].splitlines()) == 9  # a heading and the first 8 of TensorFlow's 152 lines
    assert error.tensorflow_error.message == text


def test_when_every_task_answers_the_error_says_it_cannot_name_one():
    sockets = [_listening_socket() for _ in range(2)]
    try:
        cluster = {"chief": ["127.0.0.1:1"], "worker": [sockets[0][1]], "ps": [sockets[1][1]]}
        strategy = ParameterServerStrategy(ParameterServerOptions(cluster=cluster, task_type="worker"))
        with mock.patch.object(lifecycle, "SETTLE_SECONDS", 0.5):  # probed again for that long
            error = strategy._lost_task_error(tf.errors.AbortedError(None, None, "aborted"))
    finally:
        for server, _ in sockets:
            server.close()
    assert "lost a task it cannot name" in str(error)


def test_a_cluster_with_a_chief_needs_to_know_which_task_this_is():
    """Every task running the same script with cluster= used to take itself for the chief."""
    with pytest.raises(ValueError, match="`cluster` lists a chief but nothing says which task this process is"):
        ParameterServerStrategy(ParameterServerOptions(cluster=CLUSTER))


def test_auto_refuses_an_explicit_cluster_it_would_drop():
    with mock.patch.dict(os.environ, {}, clear=True):
        with pytest.raises(TypeError, match=r"auto picks one from the environment only \(here 'single'\).*"
                                            r"fix: name the backend: make_strategy\('parameter_server'"):
            tfdist.make_strategy("auto", cluster=CLUSTER, task_type="chief")
