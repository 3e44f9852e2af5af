"""Environment detectors read a mapping and never write it (no TensorFlow)."""
from __future__ import annotations

import json
import os
from unittest import mock

import pytest

from tfdist.environments import (DETECTION_ORDER, HorovodRunEnvironment, LocalEnvironment, SlurmEnvironment,
                                 TFConfigEnvironment, detect_environment)


def test_detection_order_is_the_documented_one():
    assert [e.name for e in DETECTION_ORDER] == ["horovodrun", "tf_config", "slurm", "local"]


def test_horovodrun_variables():
    env = HorovodRunEnvironment({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1"})
    assert (env.rank, env.size, env.local_rank, env.launcher) == (3, 4, 1, "horovodrun")


def test_mpirun_variables():
    env = HorovodRunEnvironment({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "8",
                                 "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    assert (env.rank, env.size, env.local_rank, env.launcher) == (2, 8, 0, "mpirun")


def test_malformed_rank_names_the_variable():
    env = HorovodRunEnvironment({"HOROVOD_RANK": "one", "HOROVOD_SIZE": "2"})
    with pytest.raises(ValueError, match="HOROVOD_RANK='one' is not an integer"):
        _ = env.rank


def test_tf_config_ranks_put_the_chief_first():
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]}
    worker1 = TFConfigEnvironment({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})})
    assert (worker1.task_type, worker1.task_index, worker1.rank, worker1.size, worker1.has_ps) == ("worker", 1, 2, 3, True)


def test_tf_config_not_json_names_the_variable_and_the_fix():
    env = TFConfigEnvironment({"TF_CONFIG": "{oops"})
    with pytest.raises(ValueError, match=r"TF_CONFIG: is not valid JSON: .*; fix: .*tfdist tf-config validate"):
        _ = env.config


def test_slurm_interactive_shell_is_not_a_job():
    assert SlurmEnvironment.detect({"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_NAME": "train"})
    assert not SlurmEnvironment.detect({"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_NAME": "bash"})


def test_detect_environment_reads_os_environ_without_writing_it():
    with mock.patch.dict(os.environ, {"SLURM_NTASKS": "4", "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}, clear=True):
        before = dict(os.environ)
        env = detect_environment()
        assert isinstance(env, SlurmEnvironment)
        assert (env.rank, env.size, env.local_rank) == (1, 4, 1)
        assert dict(os.environ) == before
    with mock.patch.dict(os.environ, {}, clear=True):
        assert isinstance(detect_environment(), LocalEnvironment)


@pytest.mark.parametrize("cluster, task, chief", [
    ({"chief": ["a:1"], "worker": ["b:1"]}, {"type": "chief", "index": 0}, True),
    ({"chief": ["a:1"], "worker": ["b:1"]}, {"type": "worker", "index": 0}, False),
    ({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 0}, True),
    ({"worker": ["a:1", "b:1"]}, {"type": "worker", "index": 1}, False),
])
def test_tf_config_chief_is_the_chief_else_worker_0(cluster, task, chief):
    env = TFConfigEnvironment({"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})})
    assert env.is_chief is chief
