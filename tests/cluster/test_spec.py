"""Tests of tfdist.cluster.spec and tfdist.cluster.files: addresses, specs, helpers, cluster files."""

from __future__ import annotations

import dataclasses
import json
import socket

import pytest

from tfdist.cluster.errors import ClusterConfigError
from tfdist.cluster.files import load_cluster_file
from tfdist.cluster.spec import (
    Address,
    ClusterSpec,
    free_ports,
    host_problem,
    local_cluster,
    round_robin_cluster,
)


@pytest.mark.parametrize(
    "text, host, port",
    [
        ("node1:2222", "node1", 2222),
        ("10.0.0.1:1", "10.0.0.1", 1),
        ("Node-1.example.com:65535", "Node-1.example.com", 65535),
        ("host.example.com.:80", "host.example.com.", 80),
        ("[::1]:2222", "::1", 2222),
        ("[fe80::1%eth0]:2222", "fe80::1%eth0", 2222),
        ("0.0.0.0:5000", "0.0.0.0", 5000),
    ],
)
def test_address_parse_accepts_valid_forms(text, host, port):
    assert Address.parse(text) == Address(host, port)


@pytest.mark.parametrize(
    "address, text",
    [
        (Address("node1", 2222), "node1:2222"),
        (Address("::1", 2222), "[::1]:2222"),
        (Address("2001:db8::5", 1), "[2001:db8::5]:1"),
    ],
)
def test_address_str_round_trips(address, text):
    assert str(address) == text
    assert Address.parse(text) == address


@pytest.mark.parametrize(
    "text, expected",
    [
        ("node1", "'node1' has no port; fix: write it as HOST:PORT, e.g. 'node1:2222'"),
        ("", "the address is empty"),
        ("h:99999", "'h:99999' has port 99999; ports are 1-65535; fix: use a port between 1 and 65535"),
        ("h:0", "'h:0' has port 0; ports are 1-65535"),
        ("h:-1", "has port '-1', which is not a number"),
        ("h:22a", "has port '22a', which is not a number"),
        ("h:", "has port '', which is not a number"),
        ("h:²", "has port '²', which is not a number"),
        ("h:٢٢٢٢", "has port '٢٢٢٢', which is not a number: it holds '٢' (U+0662 ARABIC-INDIC DIGIT TWO), which is "
                  "not ASCII; numbers are read in ASCII only; fix: type it as 'h:2222'"),  # int() reads 2222
        ("::1:2222", "IPv6 hosts need brackets"),
        ("[::1:2222", "has '[' but no ']'"),
        ("[::1]2222", "has no ':PORT' after ']'"),
        ("[node1]:2222", "drop the brackets: 'node1:2222'"),
        ("[::g]:2222", "is not a valid IPv6 address"),
        ("node 1:2222", "contains whitespace"),
        ("no_de:2222", "label 'no_de' must be 1-63 letters"),
        ("-node:2222", "label '-node'"),
        ("a..b:2222", "label ''"),
        ("256.1.1.1:2222", "looks like an IPv4 address but is not a valid one"),
        (f"{'a' * 64}:1", "must be 1-63"),
        (5, "expected a 'HOST:PORT' string, got int 5"),
    ],
)
def test_address_parse_rejects_with_field_message_and_fix(text, expected):
    with pytest.raises(ClusterConfigError) as info:
        Address.parse(text, field="--worker")
    assert str(info.value).startswith("--worker: ")
    assert expected in str(info.value)
    assert all(p.field == "--worker" and p.fix for p in info.value.problems)


def test_address_parse_reports_bad_host_and_bad_port_together():
    with pytest.raises(ClusterConfigError) as info:
        Address.parse("bad_host:70000", field="x")
    messages = [p.message for p in info.value.problems]
    assert len(messages) == 2
    assert "port 70000" in messages[0] and "bad_host" in messages[1]


@pytest.mark.parametrize(
    "host", ["a", "a-b", "1node", "x.y.z", "127.0.0.1", "::", "2001:db8::1", "n." + "a" * 63]
)
def test_host_problem_none_for_valid_hosts(host):
    assert host_problem(host) is None


def test_host_problem_limits_total_length():
    host = ".".join(["a" * 60] * 5)
    assert "at most 253" in host_problem(host)


def test_cluster_spec_is_frozen_and_stores_tuples():
    spec = ClusterSpec(worker=[Address("h", 1)])
    assert spec.worker == (Address("h", 1),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.worker = ()  # type: ignore[misc]


def _example() -> ClusterSpec:
    return ClusterSpec(
        chief=[Address("h1", 2222)],
        worker=[Address("h2", 2222), Address("h3", 2222)],
        ps=[Address("h3", 2223)],
        evaluator=[Address("h1", 2223)],
    )


def test_training_cluster_never_lists_the_evaluator():
    assert _example().training_cluster() == {
        "chief": ["h1:2222"],
        "worker": ["h2:2222", "h3:2222"],
        "ps": ["h3:2223"],
    }


def test_training_cluster_returns_fresh_dicts():
    spec = _example()
    first = spec.training_cluster()
    first["worker"].append("evil:1")
    assert spec.training_cluster()["worker"] == ["h2:2222", "h3:2222"]


def test_tasks_in_fixed_order():
    assert _example().tasks() == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("evaluator", 0)]


def test_summary():
    assert _example().summary() == "1 chief, 2 workers, 1 ps, 1 evaluator"
    assert ClusterSpec().summary() == "no tasks"


def test_address_of_unknown_task_names_the_tasks():
    with pytest.raises(
        ClusterConfigError,
        match=r"worker:2 is not a task of this cluster \(its tasks: chief:0, "
        r"worker:0, worker:1, ps:0, evaluator:0\)",
    ):
        _example().address_of("worker", 2)
    with pytest.raises(ClusterConfigError, match=r"unknown task type 'master'.*rename 'master' to 'chief'"):
        _example().addresses("master")


def test_from_dict_builds_spec_with_separate_evaluator():
    data = {"chief": ["h1:2222"], "worker": ["h2:2222", "h3:2222"], "ps": ["h3:2223"]}
    original = json.loads(json.dumps(data))
    assert ClusterSpec.from_dict(data, evaluator="h1:2223") == _example()
    assert data == original  # input not mutated


def test_from_dict_reports_every_problem():
    with pytest.raises(ClusterConfigError) as info:
        ClusterSpec.from_dict({"master": ["a:1"], "worker": "a:1", "ps": [], "chief": ["a", "b:x"]})
    fields = [p.field for p in info.value.problems]
    assert fields == [
        "cluster.master",
        "cluster.worker",
        "cluster.ps",
        "cluster.chief[0]",
        "cluster.chief[1]",
    ]
    assert 'write it as ["a:1"]' in str(info.value)
    assert str(info.value).startswith("5 problems:\n  cluster.master: ")


def test_from_dict_evaluator_rules():
    with pytest.raises(ClusterConfigError, match="tensorflow/tensorflow#46169"):
        ClusterSpec.from_dict({"worker": ["a:1"], "evaluator": ["a:2"]}, allow_evaluator=False)
    with pytest.raises(ClusterConfigError, match="the evaluator is given twice"):
        ClusterSpec.from_dict({"worker": ["a:1"], "evaluator": ["a:2"]}, evaluator="a:3")
    with pytest.raises(ClusterConfigError, match="must be an object mapping task types"):
        ClusterSpec.from_dict(["a:1"])


def test_local_cluster_assigns_ports_in_task_order():
    spec = local_cluster(workers=2, ps=1, ports=[10, 11, 12, 13, 14], evaluator=True)
    assert spec.training_cluster() == {
        "chief": ["127.0.0.1:10"],
        "worker": ["127.0.0.1:11", "127.0.0.1:12"],
        "ps": ["127.0.0.1:13"],
    }
    assert spec.evaluator == (Address("127.0.0.1", 14),)
    assert local_cluster(1, 0, [7], host="::1", chief=False).worker == (Address("::1", 7),)


def test_local_cluster_rejects_wrong_number_of_ports():
    with pytest.raises(
        ClusterConfigError, match=r"ports: got 2 ports for 3 tasks; fix: pass exactly 3 ports"
    ):
        local_cluster(workers=2, ps=0, ports=[1, 2])
    with pytest.raises(ClusterConfigError, match=r"workers: must be a whole number >= 0, got -1"):
        local_cluster(workers=-1, ps=0, ports=[])


def test_round_robin_cluster_increments_ports_on_shared_hosts():
    spec = round_robin_cluster(["a", "b", "c"], workers=2, ps=2, chief=True, evaluator=True, port=5000)
    assert spec.chief == (Address("a", 5000),)
    assert spec.worker == (Address("b", 5000), Address("c", 5000))
    assert spec.ps == (Address("a", 5001), Address("b", 5001))
    assert spec.evaluator == (Address("c", 5001),)
    with pytest.raises(ClusterConfigError, match="no hosts given"):
        round_robin_cluster([], workers=1)


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(1 <= p <= 65535 for p in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))


def test_load_cluster_file_yaml_and_json_forms(tmp_path):
    yaml_file = tmp_path / "cluster.yaml"
    yaml_file.write_text(
        "chief: ['h1:2222']\nworker:\n  - h2:2222\n  - h3:2222\nps: [h3:2223]\nevaluator: [h1:2223]\n"
    )
    assert load_cluster_file(yaml_file) == _example()
    json_file = tmp_path / "tf_config.json"
    json_file.write_text(
        json.dumps({"cluster": {"worker": ["h2:2222"]}, "task": {"type": "worker", "index": 0}})
    )
    assert load_cluster_file(json_file) == ClusterSpec(worker=[Address("h2", 2222)])


@pytest.mark.parametrize(
    "name, text, expected",
    [
        (
            "bad.json",
            "{'worker': []}",
            "is not valid JSON: Expecting property name enclosed in double quotes at line 1",
        ),
        ("bad.yaml", "worker: [a:1\n", "is not valid YAML"),
        ("list.yaml", "- a:1\n", "must hold a mapping of task types, got list"),
        (
            "eval.json",
            '{"cluster": {"worker": ["a:1"], "evaluator": ["a:2"]}}',
            "tensorflow/tensorflow#46169",
        ),
    ],
)
def test_load_cluster_file_errors_name_the_file(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ClusterConfigError) as info:
        load_cluster_file(path)
    assert expected in str(info.value)


def test_load_cluster_file_missing(tmp_path):
    with pytest.raises(ClusterConfigError, match=r"cannot be read.*; fix: check the path"):
        load_cluster_file(tmp_path / "nope.yaml")


# --- files keep nothing back; hostile values; limits --------------------------------------------------------


@pytest.mark.parametrize(
    "text, fields",
    [
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "extra": 1}',
         ["c.json.extra"]),
        ('{"cluster": {"worker": ["a:1"]}, "rpc_layer": "grpc"}', ["c.json.rpc_layer"]),
        ('{"cluster": {"worker": ["a:1"]}, "ps": ["b:1"]}', ["c.json.ps"]),
        ('{"cluster": {"worker": ["a"]}, "extra": 1}', ["c.json.extra", "cluster.worker[0]"]),
    ],
)
def test_cluster_file_keys_that_would_be_dropped_are_reported(tmp_path, text, fields):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ClusterConfigError) as info:
        load_cluster_file(path)
    assert [p.field.replace(str(tmp_path) + "/", "") for p in info.value.problems] == fields
    assert "is not used" in info.value.problems[0].message


def test_cluster_file_refuses_yaml_aliases_and_repeated_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("w: &w a:1\nworker: [*w]\n")
    with pytest.raises(ClusterConfigError, match="uses a YAML anchor or alias"):
        load_cluster_file(path)
    path.write_text("worker: [a:1]\nworker: [b:1]\n")
    with pytest.raises(ClusterConfigError, match="key 'worker' is given more than once"):
        load_cluster_file(path)


def test_cluster_file_reads_at_most_the_limit(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("worker: [" + ", ".join(["a:1"] * 300_000) + "]\n")
    with pytest.raises(ClusterConfigError, match="is larger than 1,048,576 bytes"):
        load_cluster_file(path)


def test_a_5000_digit_port_is_a_problem_not_a_value_error():
    with pytest.raises(ClusterConfigError) as info:
        Address.parse("h:" + "9" * 5000, field="--worker")
    assert "has a port of 5000 digits; ports are 1-65535" in str(info.value)
    assert len(str(info.value)) < 300  # the value is echoed cut short


@pytest.mark.parametrize("kwargs", [{"workers": 10 ** 30}, {"workers": 1, "ps": 10_000}, {"workers": 10_001}])
def test_round_robin_and_local_clusters_count_before_building(kwargs):
    with pytest.raises(ClusterConfigError, match="tfdist's limit is 10,000 per cluster"):
        round_robin_cluster(["a"], **kwargs)
    with pytest.raises(ClusterConfigError, match="tfdist's limit is 10,000 per cluster"):
        local_cluster(kwargs["workers"], kwargs.get("ps", 0), ports=[])
