"""Tests of tfdist.cluster.tf_config, with property tests over random valid clusters."""

from __future__ import annotations

import json
import shlex

import pytest

from support import examples
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
    assert "; fix: write the task as TYPE:INDEX, e.g. 'worker:1'" in str(info.value)


# --- property tests -----------------------------------------------------------------------------------

_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
_dns = st.lists(_label, min_size=1, max_size=3).map(".".join).filter(
    # localhost also collides with 127.0.0.1 and ::1
    lambda h: host_problem(h) is None and not h.endswith("localhost")
)
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


@settings(database=None, max_examples=examples(500), deadline=None)
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


# --- TFConfig: the one parsed TF_CONFIG ------------------------------------------------------------------

import dataclasses  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from tfdist.cluster import TFConfig  # noqa: E402
from tfdist.errors import TfdistError  # noqa: E402

PS_CONFIG = {"cluster": TRAINING, "task": {"type": "worker", "index": 1}}


def test_tf_config_parse_text_and_mapping_give_the_same_frozen_value():
    from_text = TFConfig.parse(json.dumps(PS_CONFIG))
    assert from_text == TFConfig.parse(PS_CONFIG) == TFConfig.parse(json.dumps(PS_CONFIG).encode())
    assert from_text.cluster == {"chief": ("h1:2222",), "worker": ("h2:2222", "h3:2222"), "ps": ("h3:2223",)}
    assert (from_text.task_type, from_text.task_index, from_text.rpc_layer, from_text.environment) == (
        "worker", 1, None, None)
    assert hash(from_text) == hash(TFConfig.parse(PS_CONFIG))
    with pytest.raises(dataclasses.FrozenInstanceError):
        from_text.task_index = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        from_text.cluster["worker"] = ("evil:1",)  # type: ignore[index]


def test_tf_config_does_not_share_state_with_its_input():
    raw = json.loads(json.dumps(PS_CONFIG))
    config = TFConfig.parse(raw)
    raw["cluster"]["worker"].append("evil:1")
    assert config.cluster["worker"] == ("h2:2222", "h3:2222")
    out = config.to_dict()
    out["cluster"]["worker"].append("evil:1")
    assert config.to_dict() == PS_CONFIG and json.loads(json.dumps(config.to_dict())) == PS_CONFIG


@pytest.mark.parametrize(
    "cluster, task, expected",
    [
        # is_chief, rank, num_training_tasks, chief_address, has_ps, has_chief, num_workers, num_ps
        (TRAINING, ("chief", 0), (True, 0, 3, "h1:2222", True, True, 2, 1)),
        (TRAINING, ("worker", 0), (False, 1, 3, "h1:2222", True, True, 2, 1)),
        (TRAINING, ("worker", 1), (False, 2, 3, "h1:2222", True, True, 2, 1)),
        (TRAINING, ("ps", 0), (False, 0, 3, "h1:2222", True, True, 2, 1)),
        (TRAINING, ("evaluator", 0), (False, 0, 3, "h1:2222", True, True, 2, 1)),
        ({"worker": ["a:1", "b:1"]}, ("worker", 0), (True, 0, 2, "a:1", False, False, 2, 0)),
        ({"worker": ["a:1", "b:1"]}, ("worker", 1), (False, 1, 2, "a:1", False, False, 2, 0)),
        ({"chief": ["a:1"]}, ("chief", 0), (True, 0, 1, "a:1", False, True, 0, 0)),
    ],
)
def test_tf_config_roles(cluster, task, expected):
    config = TFConfig.parse({"cluster": cluster, "task": {"type": task[0], "index": task[1]}})
    got = (config.is_chief, config.rank, config.num_training_tasks, config.chief_address, config.has_ps,
           config.has_chief, config.num_workers, config.num_ps)
    assert got == expected


def test_tf_config_address_and_optional_keys():
    config = TFConfig.parse({**PS_CONFIG, "rpc_layer": "grpc", "environment": "cloud"})
    assert config.address("worker", 1) == "h3:2222" and config.address("ps", 0) == "h3:2223"
    assert config.to_dict()["rpc_layer"] == "grpc" and config.to_dict()["environment"] == "cloud"
    with pytest.raises(ClusterConfigError, match=r"worker:2 is not a task of this cluster \(its tasks: "
                       r"chief:0, worker:0, worker:1, ps:0\); fix: pick one of the listed tasks"):
        config.address("worker", 2)
    with pytest.raises(ClusterConfigError, match="evaluator:0 is not a task"):
        config.address("evaluator", 0)  # the evaluator is never in the cluster


def test_tf_config_parse_raises_every_problem_of_validate_tf_config():
    bad = {"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 5},
           "rpc_layer": "grpc+verbs"}
    with pytest.raises(ClusterConfigError) as info:
        TFConfig.parse(bad)
    assert info.value.problems == validate_tf_config(bad)
    assert [p.field for p in info.value.problems] == ["rpc_layer", "cluster.worker[1]", "task.index"]
    assert isinstance(info.value, TfdistError) and isinstance(info.value, ValueError)


def test_tf_config_parse_names_its_source():
    with pytest.raises(ClusterConfigError, match=r"^my-file: is not valid JSON"):
        TFConfig.parse("{", source="my-file")


def test_tf_config_from_environ():
    assert TFConfig.from_environ({}) is None
    assert TFConfig.from_environ({"TF_CONFIG": "  "}) is None
    assert TFConfig.from_environ({"TF_CONFIG": json.dumps(PS_CONFIG)}) == TFConfig.parse(PS_CONFIG)
    with pytest.raises(ClusterConfigError, match="^TF_CONFIG: is not valid JSON"):
        TFConfig.from_environ({"TF_CONFIG": "{'cluster': 1}"})
    environ = {"TF_CONFIG": json.dumps(PS_CONFIG)}
    TFConfig.from_environ(environ)
    assert environ == {"TF_CONFIG": json.dumps(PS_CONFIG)}  # read, never written


def test_tf_config_is_importable_without_tensorflow():
    code = ("import sys; from tfdist.cluster import TFConfig; "
            "TFConfig.parse('{\"cluster\": {\"worker\": [\"a:1\"]}, "
            "\"task\": {\"type\": \"worker\", \"index\": 0}}'); "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "False"


@settings(database=None, max_examples=examples(200), deadline=None)
@given(valid_clusters())
def test_every_generated_tf_config_parses_to_its_own_task(spec):
    for name, config in all_tf_configs(spec).items():
        parsed = TFConfig.parse(json.dumps(config))
        assert f"{parsed.task_type}:{parsed.task_index}" == name
        assert parsed.to_dict() == config


def test_the_workers_beside_the_chief_are_those_on_its_host_unless_every_worker_is():
    def config(*workers: str, chief: str | None = "w1:2222") -> TFConfig:
        return TFConfig(cluster={**({"chief": (chief,)} if chief else {}), "worker": workers, "ps": ("p1:1",)},
                        task_type="worker", task_index=0)

    assert config("w1:2223", "w2:2222").workers_beside_chief == frozenset({0})
    assert config("w2:2222", "w1:2223", "w3:1").workers_beside_chief == frozenset({1})
    assert config("w2:2222", "w3:2222").workers_beside_chief == frozenset()
    assert config("w1:2223", "w1:2224").workers_beside_chief == frozenset()  # each alike: none singled out
    assert config("w1:2223", "w2:1", chief=None).workers_beside_chief == frozenset()
    assert config("[::1]:2", "[::2]:2", chief="[::1]:1").workers_beside_chief == frozenset({0})
    assert config("W1:2223", "w2:2222").workers_beside_chief == frozenset({0})  # host names ignore case

