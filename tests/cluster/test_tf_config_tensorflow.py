"""TensorFlow's own TF_CONFIG reader (TFConfigClusterResolver) as the oracle: it reads what tfdist
generates, resolves what tfdist accepts to the same cluster and task, and reads an empty cluster (or
silently another one) from what tfdist rejects."""

from __future__ import annotations

import json
import os
from unittest import mock

import pytest

from tfdist.cluster.spec import Address, ClusterSpec
from tfdist.cluster.tf_config import all_tf_configs

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow  # imports TensorFlow

SPEC = ClusterSpec(
    chief=[Address("h1", 2222)],
    worker=[Address("h2", 2222), Address("h3", 2222)],
    ps=[Address("h3", 2223)],
    evaluator=[Address("h1", 2223)],
)


@pytest.mark.parametrize("name", list(all_tf_configs(SPEC)))
def test_tf_config_cluster_resolver_reads_generated_config(name):
    config = all_tf_configs(SPEC)[name]
    with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(config)}, clear=True):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        task_type, task_id = resolver.task_type, resolver.task_id
        cluster = resolver.cluster_spec().as_dict()
    assert f"{task_type}:{task_id}" == name
    assert (
        cluster
        == SPEC.training_cluster()
        == {"chief": ["h1:2222"], "worker": ["h2:2222", "h3:2222"], "ps": ["h3:2223"]}
    )
    assert "evaluator" not in cluster


# --- tfdist's validation agrees with TensorFlow's resolver (issue 9 item 6) ---------------------------

from tfdist.cluster import TFConfig, validate_tf_config  # noqa: E402

ACCEPTED = [
    {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]},
     "task": {"type": "ps", "index": 0}},
    {"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0},
     "rpc_layer": "grpc"},
    {"cluster": {"worker": ["[::1]:5", "127.0.0.1:5"]}, "task": {"type": "worker", "index": 1}},
    {"cluster": {"chief": ["a:1"]}, "task": {"type": "chief", "index": 0}, "environment": "cloud"},
    {"cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]},
     "task": {"type": "evaluator", "index": 0}},
]
# TensorFlow reads an empty cluster from each of these (no "cluster" key, or an empty one)
EMPTY_IN_TENSORFLOW = [
    {"chief": ["a:1"], "worker": ["b:1"], "task": {"type": "worker", "index": 0}},
    {"worker": ["a:1"], "task": {"type": "worker", "index": 0}},
    {"cluster": {}, "task": {"type": "worker", "index": 0}},
    {"task": {"type": "worker", "index": 0}},
]
# TensorFlow accepts these and silently keeps the last key, drops a task, or uses another RPC layer
REJECTED_TEXT = [
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, '
    '"cluster": {"worker": ["b:1"]}}',
    '{"cluster": {"worker": ["a:1"], "worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 1}}',
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc+verbs"}',
    '{"cluster": {"worker": ["localhost:1", "127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}',
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "clustr": {"ps": ["b:1"]}}',
]


def _resolve(text: str):
    with mock.patch.dict(os.environ, {"TF_CONFIG": text}, clear=True):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id, resolver.rpc_layer


@pytest.mark.parametrize("config", ACCEPTED)
def test_what_tfdist_accepts_tensorflow_resolves_to_the_same_cluster_and_task(config):
    text = json.dumps(config)
    parsed = TFConfig.parse(text)
    assert _resolve(text) == ({t: list(a) for t, a in parsed.cluster.items()}, parsed.task_type,
                              parsed.task_index, parsed.rpc_layer)


@pytest.mark.parametrize("config", EMPTY_IN_TENSORFLOW)
def test_what_tensorflow_resolves_to_an_empty_cluster_tfdist_rejects(config):
    text = json.dumps(config)
    assert _resolve(text)[0] == {}
    problems = validate_tf_config(text)
    assert any(p.field == "cluster" for p in problems), problems
    if any(key in config for key in ("chief", "worker")):
        assert 'must go under "cluster"' in next(p.message for p in problems if p.field == "cluster")


@pytest.mark.parametrize("text", REJECTED_TEXT)
def test_what_tensorflow_reads_silently_differently_tfdist_rejects(text):
    _resolve(text)  # TensorFlow takes it without a word ...
    assert validate_tf_config(text)  # ... tfdist names the problem
