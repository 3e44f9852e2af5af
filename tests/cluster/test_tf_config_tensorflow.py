"""The one test that needs TensorFlow: TF's own TF_CONFIG reader agrees with what tfdist generates."""

from __future__ import annotations

import json
import os
from unittest import mock

import pytest

from tfdist.cluster.spec import Address, ClusterSpec
from tfdist.cluster.tf_config import all_tf_configs

tf = pytest.importorskip("tensorflow")

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
