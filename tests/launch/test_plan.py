"""Launch plans are pure: TF_CONFIG per task, GRPC_FAIL_FAST, horovodrun command (no TensorFlow)."""
from __future__ import annotations

import json

import pytest

from tfdist.launch.plan import LaunchError, horovodrun_command, plan_local_cluster


def test_every_task_gets_its_own_tf_config_and_fail_fast():
    base = {"PATH": "/bin", "GRPC_FAIL_FAST": "true"}
    spec, tasks = plan_local_cluster(["python", "train.py"], workers=2, ps=1, ports=[5000, 5001, 5002, 5003, 5004],
                                     base_env=base, evaluator=True)
    assert [t.name for t in tasks] == ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]
    cluster = {"chief": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"], "ps": ["127.0.0.1:5003"]}
    for task in tasks:
        config = json.loads(task.env["TF_CONFIG"])
        assert config == {"cluster": cluster, "task": {"type": task.task_type, "index": task.index}}
        assert task.command == ("python", "train.py")
        assert task.env["PATH"] == "/bin"
        assert task.env["GRPC_FAIL_FAST"] == "true"  # the user's explicit value wins
    assert base == {"PATH": "/bin", "GRPC_FAIL_FAST": "true"}  # input not mutated
    _, tasks = plan_local_cluster(["x"], 1, 1, [1, 2, 3], base_env={})
    assert {t.env["GRPC_FAIL_FAST"] for t in tasks} == {"use_caller"}


@pytest.mark.parametrize("workers, ps, command, message", [
    (0, 1, ["python"], "--workers is 0"),
    (1, 0, ["python"], "--ps is 0"),
    (1, 1, [], "no command to launch"),
])
def test_impossible_clusters_are_refused_with_the_fix(workers, ps, command, message):
    with pytest.raises(LaunchError, match=message) as info:
        plan_local_cluster(command, workers, ps, ports=[1, 2, 3], base_env={})
    assert "fix:" in str(info.value)


def test_horovodrun_command():
    assert horovodrun_command(["python", "t.py"], 2, horovodrun="hr") == [
        "hr", "-np", "2", "-H", "localhost:2", "--gloo", "python", "t.py"]
    assert horovodrun_command(["python"], 4, hosts="a:2,b:2", horovodrun="hr")[4] == "a:2,b:2"
    with pytest.raises(LaunchError, match="-np is 0"):
        horovodrun_command(["python"], 0)


def test_worker_cluster_has_no_chief_and_no_ps():
    from tfdist.launch.plan import plan_worker_cluster

    _, tasks = plan_worker_cluster(["python"], 2, ports=[7000, 7001], base_env={})
    assert [t.name for t in tasks] == ["worker:0", "worker:1"]
    assert json.loads(tasks[1].env["TF_CONFIG"])["cluster"] == {"worker": ["127.0.0.1:7000", "127.0.0.1:7001"]}


def test_horovodrun_beside_the_interpreter_comes_before_path(tmp_path):
    from tfdist.launch.plan import find_horovodrun

    venv, other = tmp_path / "venv" / "bin", tmp_path / "other"
    venv.mkdir(parents=True)
    other.mkdir()
    for directory in (venv, other):
        (directory / "horovodrun").write_text("#!/bin/sh\n")
    (other / "horovodrun").chmod(0o755)
    assert find_horovodrun(str(venv / "python"), path=str(other)) == str(other / "horovodrun")  # not executable
    (venv / "horovodrun").chmod(0o755)
    assert find_horovodrun(str(venv / "python"), path=str(other)) == str(venv / "horovodrun")
    assert find_horovodrun(str(tmp_path / "python"), path=str(tmp_path)) is None
