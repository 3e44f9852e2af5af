"""Launch plans are pure: TF_CONFIG per task, GRPC_FAIL_FAST, horovodrun command (no TensorFlow)."""
from __future__ import annotations

import json
import sys

import pytest

from tfdist.launch.commands import LaunchError, horovodrun_command, plan_local_cluster


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
    from tfdist.launch.commands import plan_worker_cluster

    _, tasks = plan_worker_cluster(["python"], 2, ports=[7000, 7001], base_env={})
    assert [t.name for t in tasks] == ["worker:0", "worker:1"]
    assert json.loads(tasks[1].env["TF_CONFIG"])["cluster"] == {"worker": ["127.0.0.1:7000", "127.0.0.1:7001"]}


def test_horovodrun_beside_the_interpreter_comes_before_path(tmp_path):
    from tfdist.launch.commands import find_horovodrun

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


def test_horovodrun_command_takes_the_launchers_argv_and_puts_the_interface_after_it():
    entry = ["/venv/bin/python", "-m", "tfdist.launch.horovod_launcher"]
    assert horovodrun_command(["python", "t.py"], 2, horovodrun=entry, network_interface="eth1") == [
        *entry, "--network-interface", "eth1", "-np", "2", "-H", "localhost:2", "--gloo", "python", "t.py"]


def test_the_horovod_launcher_is_this_interpreter_running_horovods_own_code():
    """Not the horovodrun script: the same argv through tfdist.launch.horovod_launcher, whose build
    check does not import TensorFlow (about 4 s of every launch)."""
    from tfdist.launch.commands import HOROVOD_LAUNCHER, horovod_launcher, launcher_argv

    pytest.importorskip("horovod.runner.launch")
    assert HOROVOD_LAUNCHER == "tfdist.launch.horovod_launcher"
    assert horovod_launcher() == [sys.executable, "-m", HOROVOD_LAUNCHER]
    assert launcher_argv(None) == horovod_launcher()
    assert horovodrun_command(["python"], 2)[:4] == [sys.executable, "-m", HOROVOD_LAUNCHER, "-np"]
    assert launcher_argv("/bin/horovodrun") == ["/bin/horovodrun"]


def test_without_the_interpreter_or_horovods_launcher_the_horovodrun_script_runs(tmp_path, monkeypatch):
    import importlib.util

    from tfdist.launch.commands import horovod_launcher

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "horovodrun").write_text("#!/bin/sh\n")
    (venv / "horovodrun").chmod(0o755)
    # an interpreter that is not there (a copied venv, a test's fake): the script beside it
    assert horovod_launcher(str(venv / "python"), path=str(tmp_path)) == [str(venv / "horovodrun")]
    assert horovod_launcher(str(tmp_path / "python"), path=str(tmp_path)) is None
    (venv / "python").symlink_to(sys.executable)
    assert horovod_launcher(str(venv / "python"), path=str(tmp_path))[1:] == ["-m", "tfdist.launch.horovod_launcher"]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "horovod.runner.launch" else find_spec(name, *a))
    assert horovod_launcher(str(venv / "python"), path=str(tmp_path)) == [str(venv / "horovodrun")]


def test_horovodrun_command_passes_the_ssh_port_and_identity_file():
    assert horovodrun_command(["python"], 2, hosts="a:1,b:1", horovodrun="hr", ssh_port=2222,
                              ssh_identity_file="/k") == [
        "hr", "-np", "2", "-H", "a:1,b:1", "-p", "2222", "-i", "/k", "--gloo", "python"]


def test_host_cluster_tasks_carry_their_tf_config_and_spec_on_stdin_not_on_the_command_line():
    from tfdist.launch.hosts import parse_hosts, place_tasks
    from tfdist.launch.commands import plan_host_cluster
    from tfdist.launch.remote import SshOptions
    from tfdist.launch.remote_task import decode_spec

    placements = place_tasks(parse_hosts("h1:1,h2:1,h3:1"), workers=2, ps=1)  # the chief takes no slot
    base = {"PATH": "/bin", "HOSTNAME": "login", "PWD": "/somewhere"}
    spec, tasks = plan_host_cluster(["python", "t.py"], placements, {"h1": [1000, 1001], "h2": [2000], "h3": [3000]},
                                    base, "/work", SshOptions(2222), grace=3.0, local_hosts={"h1"}, python="/v/python")
    assert spec.training_cluster() == {"chief": ["h1:1000"], "worker": ["h1:1001", "h2:2000"], "ps": ["h3:3000"]}
    assert [(t.label, t.ssh) for t in tasks] == [("chief:0@h1", False), ("worker:0@h1", False),
                                                 ("worker:1@h2", True), ("ps:0@h3", True)]
    assert tasks[0].command == ("/v/python", "-m", "tfdist.launch.remote_task")  # this machine: no ssh
    assert tasks[3].command[:3] == ("ssh", "-p", "2222") and tasks[3].command[-2] == "h3"
    assert "TF_CONFIG" not in " ".join(tasks[3].command)
    sent = decode_spec(tasks[3].stdin)
    assert (sent["argv"], sent["cwd"], sent["bind"], sent["grace"]) == (["python", "t.py"], "/work",
                                                                         {"host": "h3", "port": 3000}, 3.0)
    assert json.loads(sent["env"]["TF_CONFIG"])["task"] == {"type": "ps", "index": 0}
    assert sent["env"]["GRPC_FAIL_FAST"] == "use_caller" and "HOSTNAME" not in sent["env"]
    assert sent["env"]["TF_GRPC_DEFAULT_OPTIONS"] == "grpc.keepalive_time_ms=10000,grpc.keepalive_timeout_ms=10000"
    assert tasks[3].env == base  # the ssh client itself runs with the launcher's environment
    _, unbound = plan_host_cluster(["p"], placements, {"h1": [1, 2], "h2": [3], "h3": [4]}, {}, "/", bind=False)
    assert decode_spec(unbound[0].stdin)["bind"] is None
    with pytest.raises(LaunchError, match="no free port left for ps:0 on h3"):
        plan_host_cluster(["p"], placements, {"h1": [1, 2], "h2": [3], "h3": []}, {}, "/")


@pytest.mark.parametrize("user, expected", [
    (None, "grpc.keepalive_time_ms=10000,grpc.keepalive_timeout_ms=10000"),
    ("grpc.max_receive_message_length=-1",
     "grpc.max_receive_message_length=-1,grpc.keepalive_time_ms=10000,grpc.keepalive_timeout_ms=10000"),
    ("grpc.keepalive_time_ms=30000,grpc.http2.max_pings_without_data=0",  # the user's value wins
     "grpc.keepalive_time_ms=30000,grpc.http2.max_pings_without_data=0,grpc.keepalive_timeout_ms=10000"),
    ("grpc.keepalive_time_ms=1,grpc.keepalive_timeout_ms=2",
     "grpc.keepalive_time_ms=1,grpc.keepalive_timeout_ms=2"),
])
def test_keepalive_is_merged_into_the_users_grpc_options_not_dropped(user, expected):
    from tfdist.cluster.tf_config import grpc_task_env, merge_grpc_options

    assert merge_grpc_options(user) == expected
    base = {} if user is None else {"TF_GRPC_DEFAULT_OPTIONS": user}
    assert grpc_task_env(base) == {"GRPC_FAIL_FAST": "use_caller", "TF_GRPC_DEFAULT_OPTIONS": expected}
    _, tasks = plan_local_cluster(["x"], 1, 1, [1, 2, 3], base_env=base)
    assert {t.env["TF_GRPC_DEFAULT_OPTIONS"] for t in tasks} == {expected}


def test_a_host_cluster_keeps_the_users_grpc_options():
    from tfdist.launch.hosts import parse_hosts, place_tasks
    from tfdist.launch.commands import plan_host_cluster
    from tfdist.launch.remote_task import decode_spec

    placements = place_tasks(parse_hosts("h1:1,h2:1"), workers=1, ps=1)
    base = {"TF_GRPC_DEFAULT_OPTIONS": "grpc.max_send_message_length=-1"}
    _, tasks = plan_host_cluster(["p"], placements, {"h1": [1, 2], "h2": [3]}, base, "/")
    for task in tasks:
        assert decode_spec(task.stdin)["env"]["TF_GRPC_DEFAULT_OPTIONS"] == (
            "grpc.max_send_message_length=-1,grpc.keepalive_time_ms=10000,grpc.keepalive_timeout_ms=10000")


def test_a_task_on_the_launchers_own_host_gets_the_same_filtered_environment():
    from tfdist.launch.hosts import parse_hosts, place_tasks
    from tfdist.launch.commands import plan_host_cluster

    placements = place_tasks(parse_hosts("h1:1,h2:1"), workers=1, ps=1)
    base = {"PATH": "/bin", "HOSTNAME": "login", "SSH_AUTH_SOCK": "/agent", "TF_CONFIG": "{}", "X": "1"}
    _, tasks = plan_host_cluster(["p"], placements, {"h1": [1, 2], "h2": [3]}, base, "/", local_hosts={"h1"})
    local = [task for task in tasks if not task.ssh]
    remote = [task for task in tasks if task.ssh]
    assert local and remote
    for task in local:  # the supervisor merges its own env under the spec's: it must hold nothing filtered
        assert task.env == {"PATH": "/bin", "X": "1"}
    for task in remote:
        assert task.env == base  # ssh needs SSH_AUTH_SOCK
