"""Tests of tfdist.cluster.slurm: hostlists, role rule, ports per node, errors naming the variable."""

from __future__ import annotations

import pytest

from tfdist.cluster.errors import ClusterConfigError
from tfdist.cluster.slurm import expand_hostlist, parse_tasks_per_node, slurm_cluster, slurm_tf_config
from tfdist.cluster.validate import validate_tf_config


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("node1", ["node1"]),
        ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("a,b[1,3],c", ["a", "b1", "b3", "c"]),
        ("x[007]", ["x007"]),
    ],
)
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    "text, message",
    [
        ("node[1-3", "'[' without ']'"),
        ("node1-3]", "']' without '['"),
        ("n[[1]]", "nested '['"),
        ("n[3-1]", "goes backwards"),
        ("n[a-b]", "is not N or N-M"),
        ("a,,b", "empty host name"),
        ("n[0-999999]", "too large"),
    ],
)
def test_expand_hostlist_errors(text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        expand_hostlist(text)


def test_parse_tasks_per_node():
    assert parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert parse_tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match="is not COUNT or COUNT"):
        parse_tasks_per_node("2(3)")


def _env(procid, nodelist="node[1-4]", ntasks="4", **extra):
    return {"SLURM_JOB_NODELIST": nodelist, "SLURM_NTASKS": ntasks, "SLURM_PROCID": str(procid), **extra}


def test_role_rule_with_chief_one_task_per_node():
    expected = [("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    for procid, task in enumerate(expected):
        config = slurm_tf_config(_env(procid), ps=1, port=2222, chief=True)
        assert config["cluster"] == {
            "chief": ["node1:2222"],
            "worker": ["node3:2222", "node4:2222"],
            "ps": ["node2:2222"],
        }
        assert config["task"] == {"type": task[0], "index": task[1]}
        assert validate_tf_config(config) == []


def test_role_rule_without_chief_task0_is_worker0():
    spec, me = slurm_cluster(_env(0, nodelist="n[1-3]", ntasks="3"), ps=0, port=5000, chief=False)
    assert me == ("worker", 0)
    assert spec.training_cluster() == {"worker": ["n1:5000", "n2:5000", "n3:5000"]}


def test_several_tasks_per_node_get_port_offsets():
    env = _env(2, nodelist="a,b", ntasks="3", SLURM_TASKS_PER_NODE="2,1")
    spec, me = slurm_cluster(env, ps=1, port=2222, chief=True)
    assert spec.training_cluster() == {"chief": ["a:2222"], "worker": ["b:2222"], "ps": ["a:2223"]}
    assert me == ("worker", 0)


def test_tasks_per_node_compressed_form_and_ntasks_per_node():
    env = _env(5, nodelist="g[1-3]", ntasks="6", SLURM_TASKS_PER_NODE="2(x3)")
    spec, me = slurm_cluster(env, ps=0, port=100)
    assert spec.training_cluster()["worker"] == ["g1:100", "g1:101", "g2:100", "g2:101", "g3:100", "g3:101"]
    assert me == ("worker", 5)
    env = _env(4, nodelist="g[1-3]", ntasks="5", SLURM_NTASKS_PER_NODE="2")
    spec, me = slurm_cluster(env, ps=0, port=100)
    assert spec.training_cluster()["worker"] == ["g1:100", "g1:101", "g2:100", "g2:101", "g3:100"]
    assert me == ("worker", 4)


def test_environ_is_not_mutated():
    env = _env(1)
    before = dict(env)
    slurm_tf_config(env, ps=1, chief=True)
    assert env == before


def test_missing_variables_are_all_named():
    with pytest.raises(ClusterConfigError) as info:
        slurm_tf_config({})
    assert [p.field for p in info.value.problems] == ["SLURM_JOB_NODELIST", "SLURM_NTASKS", "SLURM_PROCID"]
    assert all(p.message == "is not set" and "srun" in p.fix for p in info.value.problems)


@pytest.mark.parametrize(
    "env, field, text",
    [
        (_env(0, nodelist="node[1-"), "SLURM_JOB_NODELIST", "'node[1-' is garbled"),
        (_env("x"), "SLURM_PROCID", "'x' is garbled (not a whole number)"),
        (_env(0, ntasks="0"), "SLURM_NTASKS", "'0' is garbled (must be at least 1)"),
        (_env(4), "SLURM_PROCID", "is 4 but SLURM_NTASKS is 4"),
        (_env(0, ntasks="5"), "SLURM_TASKS_PER_NODE", "places 4 tasks on 4 node(s), but SLURM_NTASKS=5"),
        (_env(0, SLURM_TASKS_PER_NODE="1(x3"), "SLURM_TASKS_PER_NODE", "is garbled"),
        (_env(0, SLURM_NTASKS_PER_NODE="two"), "SLURM_NTASKS_PER_NODE", "'two' is not a whole number"),
    ],
)
def test_garbled_variables(env, field, text):
    with pytest.raises(ClusterConfigError) as info:
        slurm_tf_config(env, ps=1, chief=True)
    assert info.value.problems[0].field == field
    assert text in str(info.value)


def test_too_few_tasks_for_roles():
    with pytest.raises(
        ClusterConfigError,
        match=r"SLURM_NTASKS: is 2, but a chief, 1 ps and at least one worker "
        r"need 3 tasks; fix: run with --ntasks=3 or more",
    ):
        slurm_tf_config(_env(0, nodelist="a,b", ntasks="2"), ps=1, chief=True)


def test_ps_without_chief_is_rejected_by_validation():
    with pytest.raises(ClusterConfigError, match="ps tasks needs a chief"):
        slurm_tf_config(_env(0), ps=1, chief=False)


# --- limits: counted before anything is built (issue 9 item 7) --------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["r[0-100000]n[0-100000]", "n[0-10000]", "a,n[1-10000]", "n[0-" + "9" * 18 + "]", "x[1-5000],y[1-5001]"],
)
def test_hostlists_above_the_limit_are_refused_before_expansion(text, monkeypatch):
    from tfdist.cluster import slurm

    def never(*args):
        raise AssertionError("expanded")

    monkeypatch.setattr(slurm, "_expand_ranges", never)
    with pytest.raises(ValueError, match="the hostlist is too large: it names more than 10,000 hosts"):
        expand_hostlist(text)


def test_hostlist_at_the_limit_and_giant_numbers():
    assert len(expand_hostlist("n[1-10000]")) == 10_000
    with pytest.raises(ValueError, match="is not N or N-M"):
        expand_hostlist("n[0-" + "9" * 5000 + "]")


@pytest.mark.parametrize("text", ["1000000000(x1000000000)", "1(x10001)", "10001", "1(x5000),1(x5001)"])
def test_tasks_per_node_above_the_limit(text):
    with pytest.raises(ValueError, match="places more than 10,000 tasks or nodes"):
        parse_tasks_per_node(text)


def test_ntasks_above_the_limit_is_refused_before_placing_tasks():
    env = _env(0, nodelist="a", ntasks="1000000000", SLURM_NTASKS_PER_NODE="1000000000")
    with pytest.raises(ClusterConfigError) as info:
        slurm_tf_config(env)
    assert str(info.value) == ("SLURM_NTASKS: is 1,000,000,000; tfdist's limit is 10,000 tasks per cluster; "
                               "fix: run at most 10,000 tasks")
    env = _env(0, ntasks="9" * 5000)
    with pytest.raises(ClusterConfigError, match="more than 18 digits"):
        slurm_tf_config(env)
