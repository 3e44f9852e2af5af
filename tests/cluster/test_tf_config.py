"""Tests of tfdist.cluster.tf_config, with property tests over random valid clusters."""

from __future__ import annotations

import json
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdist.cluster.errors import ClusterConfigError
from tfdist.cluster.render import render_env, render_json
from tfdist.cluster.spec import Address, ClusterSpec, address_key, host_problem
from tfdist.cluster.tf_config import all_tf_configs, parse_task, tf_config_for
from tfdist.cluster.validate import validate_cluster, validate_tf_config

SPEC = ClusterSpec(
    chief=[Address("h1", 2222)],
    worker=[Address("h2", 2222), Address("h3", 2222)],
    ps=[Address("h3", 2223)],
    evaluator=[Address("h1", 2223)],
)
TRAINING = {"chief": ["h1:2222"], "worker": ["h2:2222", "h3:2222"], "ps": ["h3:2223"]}


def test_tf_config_for_each_task():
    assert tf_config_for(SPEC, "worker", 1) == {"cluster": TRAINING, "task": {"type": "worker", "index": 1}}
    assert tf_config_for(SPEC, "evaluator", 0) == {
        "cluster": TRAINING,
        "task": {"type": "evaluator", "index": 0},
    }


@pytest.mark.parametrize("task_type, index", [("worker", 2), ("ps", 1), ("chief", -1), ("evaluator", 1)])
def test_tf_config_for_rejects_tasks_not_in_cluster(task_type, index):
    with pytest.raises(ClusterConfigError, match=f"task: {task_type}:{index} is not a task of this cluster"):
        tf_config_for(SPEC, task_type, index)


def test_tf_config_for_unknown_type():
    with pytest.raises(ClusterConfigError, match="unknown task type 'master'"):
        tf_config_for(SPEC, "master", 0)


def test_all_tf_configs_keys_in_task_order():
    configs = all_tf_configs(SPEC)
    assert list(configs) == ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]
    assert all(c["cluster"] == TRAINING for c in configs.values())
    assert configs["ps:0"]["task"] == {"type": "ps", "index": 0}


def test_returned_dicts_are_fresh():
    configs = all_tf_configs(SPEC)
    configs["worker:0"]["cluster"]["worker"].append("evil:1")
    configs["worker:1"]["task"]["index"] = 7
    assert all_tf_configs(SPEC)["worker:0"]["cluster"] == TRAINING
    assert configs["worker:1"]["cluster"]["worker"] == ["h2:2222", "h3:2222"]  # no shared lists between tasks
    assert tf_config_for(SPEC, "worker", 1)["task"]["index"] == 1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("worker:1", ("worker", 1)),
        ("chief:0", ("chief", 0)),
        ("evaluator:0", ("evaluator", 0)),
        ("ps:10", ("ps", 10)),
    ],
)
def test_parse_task(text, expected):
    assert parse_task(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("worker", "'worker' is not TYPE:INDEX"),
        ("worker:1:2", "is not TYPE:INDEX"),
        ("master:0", "has unknown task type 'master'"),
        ("worker:-1", "has index '-1', which is not a whole number >= 0"),
        ("worker:x", "has index 'x'"),
        ("", "'' is not TYPE:INDEX"),
    ],
)
def test_parse_task_errors(text, message):
    with pytest.raises(ClusterConfigError) as info:
        parse_task(text, field="--task")
    assert str(info.value).startswith("--task: ") and message in str(info.value)
    assert "Fix: write the task as TYPE:INDEX, e.g. 'worker:1'" in str(info.value)


# --- property tests -----------------------------------------------------------------------------------

_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
_dns = st.lists(_label, min_size=1, max_size=3).map(".".join).filter(lambda h: host_problem(h) is None)
_hosts = st.one_of(_dns, st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str))
_addresses = st.builds(Address, _hosts, st.integers(1, 65535))


@st.composite
def valid_clusters(draw) -> ClusterSpec:
    """Random clusters that obey every rule of validate_cluster."""
    ps = draw(st.integers(0, 3))
    chief = True if ps else draw(st.booleans())
    workers = draw(st.integers(1 if ps or not chief else 0, 4))
    evaluator = draw(st.booleans())
    n = int(chief) + workers + ps + int(evaluator)
    addresses = draw(st.lists(_addresses, min_size=n, max_size=n, unique_by=address_key))
    counts = {"chief": int(chief), "worker": workers, "ps": ps, "evaluator": int(evaluator)}
    lists, start = {}, 0
    for task_type, count in counts.items():
        lists[task_type], start = addresses[start : start + count], start + count
    return ClusterSpec(**lists)


@settings(database=None, max_examples=500, deadline=None)
@given(valid_clusters())
def test_every_generated_tf_config_validates_and_round_trips(spec):
    assert validate_cluster(spec) == []
    configs = all_tf_configs(spec)
    assert len(configs) == len(spec.tasks())
    for name, config in configs.items():
        assert validate_tf_config(config) == [], (name, config)
        assert "evaluator" not in config["cluster"]
        assert (
            ClusterSpec.from_dict(config["cluster"], allow_evaluator=False).training_cluster()
            == config["cluster"]
        )
    assert json.loads(render_json(configs)) == configs
    name = next(iter(configs))
    assert json.loads(render_json({name: configs[name]}, single=True)) == configs[name]
    lines = render_env(configs).splitlines()
    assert lines[0::2] == [f"# {name}" for name in configs]
    for line, config in zip(lines[1::2], configs.values(), strict=True):
        words = shlex.split(line)
        assert words[0] == "export" and len(words) == 2
        key, value = words[1].split("=", 1)
        assert key == "TF_CONFIG"
        assert json.loads(value) == config
        assert validate_tf_config(value) == []
