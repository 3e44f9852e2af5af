"""Every row of the auto table, as a pure function (no TensorFlow)."""
from __future__ import annotations

import json

import pytest

from tfdist.strategies.selection import select_strategy

PS_CLUSTER = json.dumps({"cluster": {"chief": ["h0:1"], "worker": ["h1:1", "h2:1"], "ps": ["h3:1"]},
                         "task": {"type": "chief", "index": 0}})
WORKER_CLUSTER = json.dumps({"cluster": {"worker": ["h1:1", "h2:1"]}, "task": {"type": "worker", "index": 1}})


@pytest.mark.parametrize("environ, gpus, expected", [
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}, 0, "horovod"),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}, 8, "horovod"),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, 0, "horovod"),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "TF_CONFIG": PS_CLUSTER}, 0, "horovod"),  # row 1 first
    ({"TF_CONFIG": PS_CLUSTER}, 4, "parameter_server"),
    ({"TF_CONFIG": WORKER_CLUSTER}, 4, "multi_worker_mirrored"),
    ({}, 2, "mirrored"),
    ({}, 1, "single"),
    ({}, 0, "single"),
    ({"TF_CONFIG": ""}, 0, "single"),  # blank TF_CONFIG is no cluster
    ({"HOROVOD_RANK": "0"}, 0, "single"),  # a stray rank without size is not a horovodrun job
    ({"PMI_RANK": "0", "PMI_SIZE": "4", "TF_CONFIG": PS_CLUSTER}, 0, "parameter_server"),  # srun --mpi=pmi2
])
def test_auto_table(environ, gpus, expected):
    selection = select_strategy(environ, gpus)
    assert selection.kind == expected
    assert selection.reason


def test_malformed_tf_config_goes_to_a_tf_distribute_backend_that_reports_it():
    assert select_strategy({"TF_CONFIG": "{not json"}, 0).kind == "multi_worker_mirrored"


SRUN_STEP = {"SLURM_NTASKS": "4", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4", "SLURM_JOB_NAME": "train"}


def test_an_srun_step_of_several_tasks_without_a_cluster_is_refused_with_the_fix():
    """SLURM was detected but ignored: every task of `srun -n 4 python train.py` trained alone."""
    from tfdist.environments.slurm import SlurmWithoutClusterError

    with pytest.raises(SlurmWithoutClusterError, match=r"task 1 of a SLURM step of 4 tasks.*; fix: export "
                                                       r"TF_CONFIG in every task .*tfdist tf-config --format slurm"):
        select_strategy(SRUN_STEP, 0)


@pytest.mark.parametrize("environ, expected", [
    ({**SRUN_STEP, "TF_CONFIG": PS_CLUSTER}, "parameter_server"),  # tf-config --format slurm exported it
    ({**SRUN_STEP, "SLURM_STEP_NUM_TASKS": "1"}, "single"),        # a one-task step
    ({k: v for k, v in SRUN_STEP.items() if k != "SLURM_STEP_NUM_TASKS"}, "single"),  # an sbatch script
])
def test_slurm_jobs_that_say_how_to_train(environ, expected):
    assert select_strategy(environ, 0).kind == expected


def test_the_auto_table_follows_the_detection_order():
    from tfdist.environments import DETECTION_ORDER
    from tfdist.strategies import selection

    names = [environment.name for environment in DETECTION_ORDER]
    assert names == ["horovodrun", "tf_config", "slurm", "local"]
    rows = [line.split("|")[2].strip() for line in selection.__doc__.splitlines() if line.startswith("| ")][1:]
    assert [row for row in rows if row] == names
