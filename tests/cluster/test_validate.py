"""Tests of tfdist.cluster.validate: every rule, all problems at once, messages with fixes."""

from __future__ import annotations

import json

import pytest

from support import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdist.cluster.errors import ClusterConfigError, Problem
from tfdist.cluster.spec import Address, ClusterSpec
from tfdist.cluster.validate import check, validate_cluster, validate_tf_config, warnings_for


def _tf_config(cluster, task=None, **extra):
    obj = {"cluster": cluster, "task": task if task is not None else {"type": "worker", "index": 0}}
    obj.update(extra)
    return obj


def test_problem_str_names_field_message_and_fix():
    problem = Problem(
        "cluster.worker[1]",
        "'10.0.0.1:99999' has port 99999; ports are 1-65535",
        "use a port between 1 and 65535",
    )
    assert str(problem) == (
        "cluster.worker[1]: '10.0.0.1:99999' has port 99999; ports are 1-65535; "
        "fix: use a port between 1 and 65535"
    )


def test_cluster_config_error_lists_all_problems():
    error = ClusterConfigError([Problem("a", "m1", "f1"), Problem("b", "m2", "f2")])
    assert isinstance(error, ValueError)
    assert str(error) == "2 problems:\n  a: m1; fix: f1\n  b: m2; fix: f2"
    with pytest.raises(ValueError):
        ClusterConfigError([])


def test_valid_cluster_has_no_problems():
    spec = ClusterSpec(
        chief=[Address("h1", 1)],
        worker=[Address("h2", 1)],
        ps=[Address("h3", 1)],
        evaluator=[Address("h1", 2)],
    )
    assert validate_cluster(spec) == []
    assert check(spec) is spec


def test_validate_cluster_returns_every_problem():
    spec = ClusterSpec(
        chief=[Address("a", 1), Address("b", 1)],
        ps=[Address("a", 1)],
        evaluator=[Address("x", 0), Address("y_", 5)],
    )
    problems = validate_cluster(spec)
    assert [(p.field, p.message) for p in problems] == [
        (
            "cluster.ps[0]",
            "'a:1' is also the address of cluster.chief[0]; every task needs its own HOST:PORT",
        ),
        ("cluster.evaluator[0]", "'x:0' has port 0; ports are 1-65535"),
        (
            "cluster.evaluator[1]",
            "'y_:5': host 'y_' is not a valid DNS name: label 'y_' must be 1-63 letters, "
            "digits or '-', not starting or ending with '-'",
        ),
        ("cluster.chief", "has 2 tasks; a cluster has at most one chief"),
        ("cluster.evaluator", "has 2 tasks; a cluster has at most one evaluator"),
        ("cluster.worker", "a cluster with ps tasks needs at least one worker"),
    ]
    with pytest.raises(ClusterConfigError) as info:
        check(spec)
    assert info.value.problems == problems


def test_duplicates_are_found_after_normalising_hosts():
    spec = ClusterSpec(
        worker=[Address("Node1", 1), Address("node1.", 1), Address("::1", 2), Address("0:0:0:0:0:0:0:1", 2)]
    )
    assert [p.field for p in validate_cluster(spec)] == ["cluster.worker[1]", "cluster.worker[3]"]


@pytest.mark.parametrize(
    "spec, field, text",
    [
        (ClusterSpec(), "cluster", "the cluster has no chief and no worker"),
        (ClusterSpec(evaluator=[Address("a", 1)]), "cluster", "no chief and no worker"),
        (
            ClusterSpec(worker=[Address("a", 1)], ps=[Address("b", 1)]),
            "cluster.chief",
            "ParameterServerStrategy runs its coordinator as the chief",
        ),
        (ClusterSpec(worker=[Address("a", True)]), "cluster.worker[0]", "which is not an integer"),
    ],
)
def test_role_rules(spec, field, text):
    problems = validate_cluster(spec)
    assert any(p.field == field and text in p.message for p in problems), problems


def test_chief_only_cluster_is_valid():
    assert validate_cluster(ClusterSpec(chief=[Address("a", 1)])) == []


def test_valid_tf_config_text_and_object():
    obj = _tf_config(
        {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]},
        {"type": "ps", "index": 0},
        rpc_layer="grpc",
        environment="cloud",
    )
    assert validate_tf_config(obj) == []
    assert validate_tf_config(json.dumps(obj)) == []
    assert validate_tf_config(json.dumps(obj).encode()) == []
    assert validate_tf_config(_tf_config({"worker": ["a:1"]}, {"type": "evaluator", "index": 0})) == []


@pytest.mark.parametrize(
    "obj, field, text",
    [
        ("", "TF_CONFIG", "is empty"),
        (
            "{'cluster': {}}",
            "TF_CONFIG",
            "is not valid JSON: Expecting property name enclosed in double quotes",
        ),
        (b"\xff", "TF_CONFIG", "is not UTF-8 text"),
        ("[1, 2]", "TF_CONFIG", "must be a JSON object, got a list"),
        ("null", "TF_CONFIG", "must be a JSON object, got null"),
        ({"task": {"type": "worker", "index": 0}}, "cluster", "TF_CONFIG has no 'cluster'"),
        ({"cluster": {"worker": ["a:1"]}}, "task", "TF_CONFIG has no 'task'"),
        (_tf_config({"worker": ["a:1"]}, extra=1), "TF_CONFIG.extra", "unknown key 'extra'"),
        (_tf_config({"worker": ["a:1"]}, rpc_layer=5), "rpc_layer", "must be a string"),
        (_tf_config("a:1"), "cluster", "must be an object mapping task types"),
        (
            _tf_config({"worker": ["a:1"], "evaluator": ["b:1"]}),
            "cluster.evaluator",
            "tensorflow/tensorflow#46169",
        ),
        (_tf_config({"master": ["a:1"], "worker": ["b:1"]}), "cluster.master", "unknown task type 'master'"),
        (
            _tf_config({"worker": ["a:1", "a:1"]}),
            "cluster.worker[1]",
            "is also the address of cluster.worker[0]",
        ),
        (_tf_config({"worker": ["a:99999"]}), "cluster.worker[0]", "has port 99999; ports are 1-65535"),
        (_tf_config({"worker": [["a", 1]]}), "cluster.worker[0]", "expected a 'HOST:PORT' string, got list"),
        (_tf_config({"worker": ["a:1"]}, []), "task", "must be an object, got a list"),
        (_tf_config({"worker": ["a:1"]}, {"index": 0}), "task.type", "the task has no 'type'"),
        (_tf_config({"worker": ["a:1"]}, {"type": "worker"}), "task.index", "the task has no 'index'"),
        (
            _tf_config({"worker": ["a:1"]}, {"type": "master", "index": 0}),
            "task.type",
            "unknown task type 'master'",
        ),
        (
            _tf_config({"worker": ["a:1"]}, {"type": "worker", "index": "0"}),
            "task.index",
            "must be an integer",
        ),
        (
            _tf_config({"worker": ["a:1"]}, {"type": "worker", "index": True}),
            "task.index",
            "must be an integer",
        ),
        (
            _tf_config({"worker": ["a:1"]}, {"type": "worker", "index": 1}),
            "task.index",
            "is 1, but cluster.worker has 1 task(s), indices 0-0",
        ),
        (_tf_config({"worker": ["a:1"]}, {"type": "worker", "index": -1}), "task.index", "is -1"),
        (
            _tf_config({"worker": ["a:1"]}, {"type": "ps", "index": 0}),
            "task.type",
            "cluster has no 'ps' tasks",
        ),
        (
            _tf_config({"worker": ["a:1"]}, {"type": "evaluator", "index": 1}),
            "task.index",
            "the evaluator's index is always 0",
        ),
        (
            _tf_config({"worker": ["a:1"]}, {"type": "worker", "index": 0, "trial": 1}),
            "task.trial",
            "unknown key",
        ),
    ],
)
def test_validate_tf_config_rules(obj, field, text):
    problems = validate_tf_config(obj)
    assert any(p.field == field and text in p.message for p in problems), problems
    assert all(p.fix for p in problems)


def test_validate_tf_config_returns_all_problems_at_once():
    obj = {
        "cluster": {"worker": ["a:0", "a:0"], "ps": ["b:1"], "evaluator": ["c:1"]},
        "task": {"type": "chief", "index": "x"},
        "bogus": 1,
    }
    fields = [p.field for p in validate_tf_config(obj)]
    assert fields == [
        "TF_CONFIG.bogus",
        "cluster.evaluator",
        "cluster.worker[0]",
        "cluster.worker[1]",
        "cluster.chief",
        "task.index",
    ]


def test_validate_tf_config_does_not_mutate_its_input():
    obj = _tf_config({"worker": ["a:1", "a:1"]})
    before = json.dumps(obj)
    validate_tf_config(obj)
    assert json.dumps(obj) == before


def test_warnings_for_all_interfaces_and_mixed_loopback():
    spec = ClusterSpec(
        worker=[Address("0.0.0.0", 1), Address("::", 2), Address("localhost", 3), Address("node1", 4)]
    )
    warnings = warnings_for(spec)
    assert len(warnings) == 3
    assert warnings[0].startswith("worker:0 uses 0.0.0.0:1: listening on all interfaces")
    assert "no authentication" in warnings[1] and "[::]:2" in warnings[1]
    assert "mixes loopback hosts (localhost) with other hosts (node1)" in warnings[2]
    assert warnings_for(ClusterSpec(worker=[Address("127.0.0.1", 1), Address("localhost", 2)])) == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["cluster", "task", "worker", "ps", "chief", "evaluator", "type", "index", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(database=None, max_examples=examples(300), deadline=None)
@given(st.one_of(json_values, json_values.map(json.dumps), st.text(max_size=40)))
def test_validate_tf_config_never_raises_on_garbage(obj):
    problems = validate_tf_config(obj)
    assert all(isinstance(p, Problem) and p.field and p.message and p.fix for p in problems)
    assert all("\n" not in str(p) for p in problems)


# --- agreement with TensorFlow's resolver, endpoints, limits (issue 9) ----------------------------------


def test_cluster_config_error_is_a_tfdist_error():
    from tfdist.errors import TfdistError

    error = ClusterConfigError([Problem("a", "m", "f")])
    assert isinstance(error, TfdistError) and isinstance(error, ValueError)
    assert str(error) == "a: m; fix: f"


def test_task_lists_outside_cluster_are_invalid_and_explained():
    problems = validate_tf_config({"chief": ["a:1"], "worker": ["b:1"],
                                   "task": {"type": "worker", "index": 0}})
    assert problems[0] == Problem(
        "cluster",
        "TF_CONFIG has no 'cluster', so TensorFlow reads an empty cluster; the task lists 'chief', 'worker' "
        'must go under "cluster"',
        'write {"cluster": {"worker": [...], ...}, "task": {...}}',
    )
    assert not any("unknown key" in p.message for p in problems)  # one explanation, not one per list


@pytest.mark.parametrize("rpc_layer", ["grpc+verbs", "GRPC", "", "grpc "])
def test_rpc_layer_other_than_grpc_is_flagged(rpc_layer):
    problems = validate_tf_config(_tf_config({"worker": ["a:1"]}, rpc_layer=rpc_layer))
    assert [(p.field, p.fix) for p in problems] == [
        ("rpc_layer", 'remove "rpc_layer" or write "rpc_layer": "grpc"')]
    assert f"is {rpc_layer!r}; tfdist supports only 'grpc'" in problems[0].message


@pytest.mark.parametrize(
    "first, second",
    [
        ("localhost:2222", "127.0.0.1:2222"),
        ("localhost:2222", "[::1]:2222"),
        ("LOCALHOST.:2222", "localhost:2222"),
        ("node.localhost:2222", "127.0.0.1:2222"),
        ("[::ffff:10.0.0.1]:2222", "10.0.0.1:2222"),
        ("[0:0:0:0:0:0:0:1]:2222", "[::1]:2222"),
    ],
)
def test_one_endpoint_written_two_ways_is_a_duplicate(first, second):
    problems = validate_tf_config(_tf_config({"worker": [first, second]}))
    assert [p.field for p in problems] == ["cluster.worker[1]"]
    assert "is also the address of cluster.worker[0]" in problems[0].message


@pytest.mark.parametrize("pair", [("127.0.0.1:2222", "[::1]:2222"), ("127.0.0.1:2222", "127.0.0.2:2222"),
                                  ("localhost:2222", "localhost:2223")])
def test_different_sockets_are_not_duplicates(pair):
    assert validate_tf_config(_tf_config({"worker": list(pair)})) == []


def test_a_list_above_the_task_limit_is_refused_before_reading_it():
    from tfdist.cluster.limits import MAX_TASKS

    class Exploding(list):
        def __iter__(self):
            raise AssertionError("the entries were read")

    problems = validate_tf_config(_tf_config({"worker": Exploding(["a:1"] * (MAX_TASKS + 1))}))
    assert [(p.field, p.message) for p in problems] == [
        ("cluster.worker", "asks for 10,001 tasks; tfdist's limit is 10,000 per cluster")]
    split = _tf_config({"chief": ["c:1"], "worker": [f"w:{i}" for i in range(1, 5001)],
                        "ps": [f"p:{i}" for i in range(1, 5001)]})
    assert [p.message for p in validate_tf_config(split)] == [
        "asks for 10,001 tasks; tfdist's limit is 10,000 per cluster"]


def test_hostile_python_objects_give_problems_not_exceptions():
    huge = 10 ** 5000
    obj = _tf_config({"worker": ["a:1"]}, {"type": "worker", "index": huge}, environment=huge)
    messages = [p.message for p in validate_tf_config(obj)]
    assert "is a number of about 5001 digits, but cluster.worker has 1 task(s), indices 0-0" in messages
    problems = validate_cluster(ClusterSpec(worker=[Address("a", huge)]))
    assert problems[0].message == (
        "'a:a number of about 5001 digits' has port a number of about 5001 digits; ports are 1-65535")
    long_key = {"x" * 5000 + "\n": 1, **_tf_config({"worker": ["a:1"]})}
    (problem,) = validate_tf_config(long_key)
    assert "\n" not in str(problem) and len(str(problem)) < 400


@pytest.mark.parametrize("address", ["\x1e", "h:1\u2028", "\x85"])
def test_a_string_task_list_with_a_line_separator_stays_one_line(address):
    """The fuzzer's find: the fix echoed ``["\x1e"]`` raw, and \x1e, \x85 and U+2028 split a line."""
    problems = validate_tf_config({"cluster": {"worker": address}, "task": {"type": "worker", "index": 0}})
    (problem,) = [p for p in problems if p.field == "cluster.worker"]
    assert len(str(problem).splitlines()) == 1 and problem.fix.startswith('write it as ["')


def test_a_printable_string_task_list_is_echoed_as_written():
    problems = validate_tf_config({"cluster": {"worker": "hé:2222"}, "task": {"type": "worker", "index": 0}})
    assert 'write it as ["hé:2222"]' in [p.fix for p in problems]
