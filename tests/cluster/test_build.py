"""tfdist.cluster.build and tfdist.cluster.source without click: the cluster from tf-config's options
(one source, the option to blame, the messages the command prints) and what `validate` finds in a
source. The command's own tests (tests/cli/test_tf_config.py) pin the same messages end to end."""
from __future__ import annotations

import dataclasses
import json

import pytest

from tfdist.cluster.build import ClusterOptions, build_cluster
from tfdist.cluster.errors import ClusterOptionError
from tfdist.cluster.source import SourceCheck, check_source
from tfdist.cluster.spec import Address, ClusterSpec

TF_CONFIG = {"cluster": {"chief": ["h1:2222"], "worker": ["h2:2222"]}, "task": {"type": "worker", "index": 0}}


def _options(given: tuple[str, ...], **values) -> ClusterOptions:
    return ClusterOptions(**values, given=frozenset(given))


def _error(options: ClusterOptions) -> ClusterOptionError:
    with pytest.raises(ClusterOptionError) as info:
        build_cluster(options)
    return info.value


def test_each_source_gives_its_cluster(tmp_path):
    explicit = _options(("chief", "worker"), chief=Address("h1", 1), worker=[Address("h2", 1), Address("h3", 1)])
    assert build_cluster(explicit) == ClusterSpec(chief=[Address("h1", 1)], worker=[Address("h2", 1),
                                                                                  Address("h3", 1)])
    shorthand = _options(("workers", "hosts", "ps_count", "with_chief", "port"), workers=2, hosts="a,b",
                         ps_count=1, with_chief=True, port=5000)
    assert build_cluster(shorthand).training_cluster() == {"chief": ["a:5000"], "worker": ["b:5000", "a:5001"],
                                                           "ps": ["b:5001"]}
    path = tmp_path / "c.yaml"
    path.write_text("worker: [a:1]\nevaluator: [b:2]\n")
    assert build_cluster(_options(("cluster_file",), cluster_file=str(path))).summary() == "1 worker, 1 evaluator"


@pytest.mark.parametrize("given, values, option, message", [
    ((), {}, None, "no cluster given; fix: pass --worker HOST:PORT (repeatable)"),
    (("worker", "workers"), {"worker": [Address("a", 1)], "workers": 1}, None,
     "give the cluster one way, not with both HOST:PORT options and the --workers/--hosts shorthand; "
     "fix: keep one of them"),
    (("worker", "port"), {"worker": [Address("a", 1)], "port": 3000}, "--port",
     "3000 is only used by the --workers/--hosts shorthand and --format slurm, not with HOST:PORT options, "
     "whose addresses carry their own ports; fix: write it into each address (--worker host:3000) or drop "
     "--port"),
    (("workers",), {"workers": 2}, "--hosts", "the shorthand needs hosts; fix: --hosts node1,node2"),
    (("hosts",), {"hosts": "a"}, "--workers", "the shorthand needs the number of workers; fix: --workers 2"),
    (("workers", "hosts"), {"workers": 1, "hosts": "a,,b"}, "--hosts", "'a,,b': empty host name in 'a,,b'; "
     "fix: write h1,h2 or node[1-3]"),
    (("workers", "hosts"), {"workers": 1, "hosts": "bad_host"}, "--hosts",
     "fix: use DNS names or IP addresses separated by commas"),
    (("workers", "hosts"), {"workers": 6000, "ps_count": 5000, "hosts": "a", "with_chief": True}, None,
     "--workers, --ps-count, --with-chief and --with-evaluator: asks for 11,001 tasks; tfdist's limit is "
     "10,000 per cluster; fix: use at most 10,000 tasks"),
    (("workers", "hosts", "port"), {"workers": 3, "hosts": "a", "port": 65534}, "--port",
     "65534 is too high: with 3 tasks on 1 host(s) the ports go up to 65536; fix: use a lower --port or "
     "more hosts"),
])
def test_errors_name_the_option_to_blame_and_the_fix(given, values, option, message):
    error = _error(_options(given, **values))
    assert error.option == option
    assert message in str(error) and "; fix: " in str(error) and "\n" not in str(error)


def test_a_bad_cluster_file_lists_its_problems_under_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("worker: [a, b]\n")
    error = _error(_options(("cluster_file",), cluster_file=str(path)))
    assert error.option == "--file" and len(error.problems) == 2
    assert str(error).splitlines() == [f"{path} is not a valid cluster file:",
                                       f"  {error.problems[0]}", f"  {error.problems[1]}"]


def test_from_params_keeps_the_given_options_and_ignores_the_rest():
    params = {"worker": (Address("a", 1),), "chief": None, "ps_count": 0, "port": 2222, "fmt": "json",
              "task": None, "with_chief": False}
    options = ClusterOptions.from_params(params, given=("worker", "fmt"))
    assert options.given == {"worker"} and options.worker == (Address("a", 1),) and options.port == 2222
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.port = 1  # type: ignore[misc]


def test_from_params_without_sources_infers_them_and_never_counts_the_port():
    """Shell completion knows values only: --port (always set) must not refuse the addresses given."""
    options = ClusterOptions.from_params({"worker": (Address("a", 1),), "port": 2222, "ps_count": 0,
                                          "hosts": None})
    assert options.given == {"worker"}
    assert build_cluster(options).tasks() == [("worker", 0)]
    assert ClusterOptions.from_params({"ps_count": 2, "port": 2222}).given == {"ps_count"}


def test_a_tf_config_source():
    check = check_source(json.dumps(TF_CONFIG), "$TF_CONFIG")
    assert check.valid and check.config is not None and check.config.task_type == "worker"
    assert check.verdict == "TF_CONFIG is valid: task worker:0 of a cluster with 1 chief, 1 worker"
    bad = check_source(json.dumps({**TF_CONFIG, "task": {"type": "ps", "index": 0}}), "stdin")
    assert not bad.valid and bad.verdict == "" and bad.warnings() == []
    assert any("ps" in str(p) for p in bad.problems)


def test_only_a_file_may_hold_a_cluster_description():
    description = json.dumps({"worker": ["a:1"], "evaluator": ["b:2"]})
    from_file = check_source(description, "c.json", from_file=True)
    assert from_file == SourceCheck(spec=ClusterSpec(worker=[Address("a", 1)], evaluator=[Address("b", 2)]))
    assert from_file.verdict == "cluster is valid: 1 worker, 1 evaluator"
    assert not check_source(description, "stdin").valid  # stdin is always a TF_CONFIG


def test_a_yaml_file_that_is_not_a_mapping_is_named_by_its_type():
    check = check_source("- a\n- b\n", "c.yaml", from_file=True)
    assert not check.valid and len(check.problems) == 1
    assert check_source("worker: [a:1, a:1]\n", "c.yaml", from_file=True).problems  # one endpoint twice
