"""Tests of ``tfdist tf-config``: exit codes and messages, option validation, completion, fuzzed input."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path
from unittest import mock

import click
import pytest
import yaml

from support import examples
from click.shell_completion import ShellComplete
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfdist.cli.main import cli
from tfdist.cli.tf_config import tf_config
from tfdist.cluster.errors import ClusterConfigError
from tfdist.cluster.spec import Address
from tfdist.cluster.tf_config import parse_task
from tfdist.cluster.validate import validate_tf_config

EXAMPLE = ["--chief", "h1:2222", "--worker", "h2:2222", "--worker", "h3:2222", "--ps", "h3:2223"]
TRAINING = {"chief": ["h1:2222"], "worker": ["h2:2222", "h3:2222"], "ps": ["h3:2223"]}


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, ["tf-config", *args], input=input, prog_name="tfdist")


def error_line(result) -> str:
    """The 'Error: ...' text click printed (may span lines for multi-problem errors)."""
    assert "Traceback" not in result.output
    return result.output[result.output.index("Error: ") :]


# --- option validation alone (make_context) -------------------------------------------------------------


def test_make_context_parses_addresses():
    ctx = tf_config.make_context("tf-config", ["--worker", "[::1]:2222", "--chief", "h:1"])
    assert ctx.params["worker"] == (Address("::1", 2222),)
    assert ctx.params["chief"] == Address("h", 1)
    assert ctx.params["fmt"] == "json"


@pytest.mark.parametrize(
    "args, hint, text",
    [
        (
            ["--worker", "h:99999"],
            "'--worker'",
            "'h:99999' has port 99999; ports are 1-65535; fix: use a port between 1 and 65535",
        ),
        (["--ps", "h"], "'--ps'", "'h' has no port"),
        (["--chief", "bad_host:1"], "'--chief'", "is not a valid DNS name"),
        (["--format", "xml"], "'--format'", "'xml' is not one of"),
        (["--port", "0"], "'--port'", "0 is not in the range 1<=x<=65535"),
        (["--workers", "-1"], "'--workers'", "-1 is not in the range 0<=x<=10000"),
    ],
)
def test_make_context_rejects_bad_options(args, hint, text):
    with pytest.raises(click.BadParameter) as info:
        tf_config.make_context("tf-config", args)
    assert info.value.exit_code == 2
    assert hint in info.value.format_message() and text in info.value.format_message()


# --- generation -------------------------------------------------------------------------------------------


def test_worked_example_json():
    result = run(*EXAMPLE)
    assert result.exit_code == 0, result.output
    configs = json.loads(result.stdout)
    assert list(configs) == ["chief:0", "worker:0", "worker:1", "ps:0"]
    assert configs["worker:1"] == {"cluster": TRAINING, "task": {"type": "worker", "index": 1}}


def test_single_task_json_is_a_bare_tf_config():
    result = run(*EXAMPLE, "--task", "ps:0")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"cluster": TRAINING, "task": {"type": "ps", "index": 0}}


def test_shorthand_round_robin_with_port_increments():
    result = run(
        "--workers", "2", "--ps-count", "1", "--with-chief", "--hosts", "h1,h2,h3", "--with-evaluator"
    )
    assert result.exit_code == 0, result.output
    configs = json.loads(result.stdout)
    assert configs["chief:0"]["cluster"] == {
        "chief": ["h1:2222"],
        "worker": ["h2:2222", "h3:2222"],
        "ps": ["h1:2223"],
    }
    assert configs["evaluator:0"]["task"] == {"type": "evaluator", "index": 0}


def test_shorthand_accepts_slurm_hostlists():
    result = run("--workers", "3", "--hosts", "n[1-2]", "--port", "5000", "--task", "worker:2")
    assert json.loads(result.stdout)["cluster"] == {"worker": ["n1:5000", "n2:5000", "n1:5001"]}


def test_env_format_round_trips_through_shlex():
    result = run(*EXAMPLE, "--format", "env")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "# chief:0" and lines[6] == "# ps:0"
    (_, assignment) = shlex.split(lines[7])
    assert json.loads(assignment.split("=", 1)[1]) == {
        "cluster": TRAINING,
        "task": {"type": "ps", "index": 0},
    }


def test_dir_format_writes_files(tmp_path):
    result = run(*EXAMPLE, "--format", "dir", "--out", str(tmp_path / "cfg"))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        str(tmp_path / "cfg" / n) for n in ("chief-0.json", "worker-0.json", "worker-1.json", "ps-0.json")
    ]
    assert json.loads((tmp_path / "cfg" / "worker-0.json").read_text())["task"] == {
        "type": "worker",
        "index": 0,
    }


def test_cluster_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump({"chief": ["h1:2222"], "worker": ["h2:2222", "h3:2222"], "ps": ["h3:2223"]})
    )
    result = run("--file", str(path), "--task", "worker:1")
    assert json.loads(result.stdout) == {"cluster": TRAINING, "task": {"type": "worker", "index": 1}}


def test_k8s_formats():
    result = run(
        *EXAMPLE, "--format", "k8s", "--k8s-image", "img:1", "--k8s-command", "python train.py --x 'a b'"
    )
    assert result.exit_code == 0, result.output
    (job,) = yaml.safe_load_all(result.stdout)
    assert job["kind"] == "TFJob"
    container = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "train.py", "--x", "a b"]
    result = run(
        *EXAMPLE, "--format", "k8s", "--k8s-image", "img:1", "--k8s-mode", "plain", "--k8s-name", "mn"
    )
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout)]
    assert kinds.count("Service") == 4 and kinds.count("Pod") == 4


def test_slurm_format_reads_environment():
    env = {"SLURM_JOB_NODELIST": "node[1-4]", "SLURM_NTASKS": "4", "SLURM_PROCID": "1"}
    with mock.patch.dict(os.environ, env, clear=True):
        result = run("--format", "slurm", "--ps-count", "1", "--with-chief")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1
    assert json.loads(result.stdout) == {
        "cluster": {"chief": ["node1:2222"], "worker": ["node3:2222", "node4:2222"], "ps": ["node2:2222"]},
        "task": {"type": "ps", "index": 0},
    }


def test_slurm_format_missing_variables():
    with mock.patch.dict(os.environ, {}, clear=True):
        result = run("--format", "slurm")
    assert result.exit_code == 2
    assert "cannot build TF_CONFIG from SLURM's variables:\n  SLURM_JOB_NODELIST: is not set" in result.output


def test_all_interfaces_warning_goes_to_stderr():
    result = run("--worker", "0.0.0.0:2222")
    assert result.exit_code == 0
    assert "Warning: worker:0 uses 0.0.0.0:2222" in result.stderr and "no authentication" in result.stderr
    assert "Warning" not in result.stdout


@pytest.mark.parametrize(
    "args, text",
    [
        ([], "Error: no cluster given; fix: pass --worker HOST:PORT"),
        (
            ["--worker", "h:99999"],
            "Error: Invalid value for '--worker': 'h:99999' has port 99999; ports are 1-65535; "
            "fix: use a port between 1 and 65535",
        ),
        (
            ["--worker", "a:1", "--ps", "a:1"],
            "Error: the cluster is invalid:\n  cluster.ps[0]: 'a:1' is also the address of cluster.worker[0]",
        ),
        (["--worker", "a:1", "--ps", "b:1"], "cluster.chief: a cluster with ps tasks needs a chief"),
        (
            ["--worker", "a:1", "--task", "worker:1"],
            "Error: Invalid value for '--task': worker:1 is not a task of this cluster (its tasks: worker:0)",
        ),
        (
            ["--worker", "a:1", "--task", "boss:0"],
            "Invalid value for '--task': 'boss:0' has unknown task type",
        ),
        (
            ["--worker", "a:1", "--workers", "2", "--hosts", "a"],
            "give the cluster one way, not with both HOST:PORT options and the --workers/--hosts shorthand",
        ),
        (["--workers", "2"], "Invalid value for '--hosts': the shorthand needs hosts"),
        (["--hosts", "a,b"], "Invalid value for '--workers': the shorthand needs the number of workers"),
        (["--workers", "1", "--hosts", "a,,b"], "Invalid value for '--hosts': 'a,,b': empty host name"),
        (
            ["--workers", "1", "--hosts", "a_b"],
            "Invalid value for '--hosts': host 'a_b' is not a valid DNS name",
        ),
        (
            ["--workers", "3", "--hosts", "a", "--port", "65534"],
            "Invalid value for '--port': 65534 is too high: with 3 "
            "tasks on 1 host(s) the ports go up to 65536",
        ),
        (["--worker", "a:1", "--out", "d"], "Invalid value for '--out': is only used with --format dir"),
        (["--worker", "a:1", "--format", "dir"], "Invalid value for '--out': --format dir needs a directory"),
        (["--worker", "a:1", "--k8s-image", "i"], "--k8s-image only apply to --format k8s"),
        (
            ["--worker", "a:1", "--format", "k8s"],
            "Invalid value for '--k8s-image': --format k8s needs a container image",
        ),
        (
            ["--worker", "a:1", "--format", "k8s", "--k8s-image", "i", "--k8s-name", "X"],
            "Invalid value for '--k8s-name': 'X' is not a valid Kubernetes name",
        ),
        (
            ["--worker", "a:1", "--format", "k8s", "--k8s-image", "i", "--k8s-command", "'a"],
            "Invalid value for '--k8s-command'",
        ),
        (
            ["--worker", "a:1", "--format", "k8s", "--k8s-image", "i", "--task", "worker:0"],
            "--task cannot be used with --format k8s",
        ),
        (["--format", "slurm", "--worker", "a:1"], "--worker cannot be used with --format slurm"),
        (
            ["--worker", "a:1", "validate"],
            "the generation options --worker cannot be used with 'tf-config validate'",
        ),
    ],
)
def test_bad_generation_input_exits_2_with_message(args, text):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert text in error_line(result)


def test_bad_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"worker": ["a:1", "b"]}')
    result = run("--file", str(path))
    assert result.exit_code == 2
    assert (
        f"Invalid value for '--file': {path} is not a valid cluster file: "
        f"{path}.worker[1]: 'b' has no port"
    ) in result.output
    assert run("--file", str(tmp_path / "missing.yaml")).exit_code == 2


# --- validate -------------------------------------------------------------------------------------------

VALID = json.dumps({"cluster": TRAINING, "task": {"type": "worker", "index": 1}})


def test_validate_reads_tf_config_env():
    with mock.patch.dict(os.environ, {"TF_CONFIG": VALID}, clear=True):
        result = run("validate")
    assert result.exit_code == 0
    assert result.stdout == "TF_CONFIG is valid: task worker:1 of a cluster with 1 chief, 2 workers, 1 ps\n"


def test_validate_invalid_exits_1_and_lists_every_problem():
    bad = json.dumps(
        {"cluster": {"worker": ["a:0", "b:1", "b:1"], "evaluator": ["b:2"]}, "task": {"type": "worker"}}
    )
    with mock.patch.dict(os.environ, {"TF_CONFIG": bad}, clear=True):
        result = run("validate")
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    lines = result.stdout.splitlines()
    assert lines[0] == "$TF_CONFIG is invalid (4 problems):"
    assert lines[1].startswith(
        "  cluster.evaluator: the evaluator must not be listed in the training cluster"
    )
    assert lines[2] == (
        "  cluster.worker[0]: 'a:0' has port 0; ports are 1-65535; fix: use a port between 1 and 65535"
    )
    assert lines[3].startswith("  cluster.worker[2]: 'b:1' is also the address of cluster.worker[1]")
    assert lines[4] == "  task.index: the task has no 'index'; fix: add \"index\": 0"


def test_validate_unset_env_is_usage_error():
    with mock.patch.dict(os.environ, {}, clear=True):
        result = run("validate")
    assert result.exit_code == 2
    assert "Error: TF_CONFIG is not set; fix: export TF_CONFIG=" in result.output


def test_validate_file_stdin_and_cluster_file(tmp_path):
    path = tmp_path / "tf.json"
    path.write_text(VALID)
    assert run("validate", str(path)).exit_code == 0
    result = run("validate", "-", input="{not json")
    assert result.exit_code == 1
    assert (
        "stdin is invalid: TF_CONFIG: is not valid JSON: Expecting property name"
        in result.stdout
    )
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("worker: [a:1, a:1]\n")
    result = run("validate", str(cluster))
    assert result.exit_code == 1
    assert "is also the address of cluster.worker[0]" in result.stdout
    cluster.write_text("worker: [a:1]\nevaluator: [a:2]\n")
    result = run("validate", str(cluster))
    assert (result.exit_code, result.stdout) == (0, "cluster is valid: 1 worker, 1 evaluator\n")
    cluster.write_text("worker: [a:1\n")
    assert "is not valid YAML" in run("validate", str(cluster)).stdout
    assert run("validate", str(tmp_path / "missing.json")).exit_code == 2


# --- shell completion -----------------------------------------------------------------------------------


def _complete(args: list[str], incomplete: str) -> list[str]:
    completer = ShellComplete(cli, {}, "tfdist", "_TFDIST_COMPLETE")
    return [item.value for item in completer.get_completions(args, incomplete)]


def test_completion_of_task_uses_the_cluster_given_so_far():
    assert _complete(["tf-config", *EXAMPLE, "--task"], "w") == ["worker:0", "worker:1"]
    assert _complete(["tf-config", "--task"], "") == ["chief:0", "worker:0", "ps:0", "evaluator:0"]
    assert _complete(["tf-config", "--format"], "") == ["json", "env", "dir", "k8s", "slurm", "sbatch"]
    assert "validate" in _complete(["tf-config"], "")


def test_bash_completion_script_is_produced():
    result = CliRunner().invoke(cli, [], prog_name="tfdist", env={"_TFDIST_COMPLETE": "bash_source"})
    assert result.exit_code == 0
    assert (
        "_tfdist_completion()" in result.output
        and "complete -o nosort -F _tfdist_completion tfdist" in result.output
    )


# --- fuzzing: bad input never gives a traceback -----------------------------------------------------------

_bad_addresses = st.one_of(
    st.text(max_size=30),
    st.builds(
        lambda h, p: f"{h}:{p}",
        st.sampled_from(["a", "10.0.0.1", "[::1]", "a_b", "-x", "1.2.3.999", ""]),
        st.one_of(st.integers(-5, 0), st.integers(65536, 10**7), st.text(max_size=5)),
    ),
)


@settings(database=None, max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["--chief", "--worker", "--ps", "--evaluator"]), _bad_addresses)
def test_fuzzed_addresses_exit_2_with_one_line_or_succeed(flag, text):
    try:
        Address.parse(text)
        expected_ok = True
    except ClusterConfigError as exc:
        expected_ok, detail = False, " ".join(p.detail for p in exc.problems)
    extra = ["--chief=zz:1", "--worker=zz:2"] if flag in ("--ps", "--evaluator") else []
    result = run(f"{flag}={text}", *extra)
    if expected_ok:
        # alone, a chief or a worker is a valid cluster; next to zz:1 and zz:2 only those two collide
        address = Address.parse(text)
        collides = bool(extra) and address.host.lower().rstrip(".") == "zz" and address.port in (1, 2)
        assert result.exit_code == (2 if collides else 0), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        if collides:
            assert "is also the address of" in error_line(result)
        return
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    message = error_line(result)
    if text.strip().isascii() and text.strip().isdigit():  # a count given to an address option (issue 34)
        assert message.startswith(f"Error: Invalid value for '{flag}': {text!r} is a number, but {flag} takes a "
                                  "task's address, HOST:PORT; fix: for ")
    else:
        assert message == f"Error: Invalid value for '{flag}': {detail}\n"
    assert message.count("\n") == 1


@settings(database=None, max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.text(max_size=12), st.from_regex(r"(chief|worker|ps|evaluator|x):-?[0-9]{1,3}", fullmatch=True)
    )
)
def test_fuzzed_tasks(task):
    result = run(*EXAMPLE, f"--task={task}")
    assert isinstance(result.exception, (SystemExit, type(None)))
    try:
        valid = parse_task(task) in [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    except ClusterConfigError:
        valid = False
    if valid:
        assert result.exit_code == 0 and json.loads(result.stdout)["task"]["type"] == task.split(":")[0]
    else:
        assert result.exit_code == 2
        assert error_line(result).startswith("Error: Invalid value for '--task': ")
        assert error_line(result).count("\n") == 1


_json_texts = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70000) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["cluster", "task", "worker", "ps", "chief", "evaluator", "type", "index"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=10,
).map(json.dumps)


_env_safe_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)


@settings(database=None, max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_json_texts, _env_safe_text))
def test_fuzzed_tf_config_text_through_validate(text):
    with mock.patch.dict(os.environ, {"TF_CONFIG": text}, clear=True):
        result = run("validate")
    assert isinstance(result.exception, (SystemExit, type(None))), result.exception
    assert "Traceback" not in result.output
    # $TF_CONFIG is always read as a TF_CONFIG: task lists without "cluster" are invalid (TensorFlow
    # would read an empty cluster), so there is no second branch for the cluster-file form
    problems = validate_tf_config(text)
    assert result.exit_code == (1 if problems else 0)
    if len(problems) == 1:
        assert result.stdout == f"$TF_CONFIG is invalid: {problems[0]}\n"
    elif problems:
        assert result.stdout.splitlines()[1:] == [f"  {p}" for p in problems]


# --- issue 9: exit codes agree with the docs; nothing dropped; limits -----------------------------------


def test_unwritable_out_is_a_usage_error_exit_2():
    # a short path, shown whole (pytest's tmp_path under xdist is long enough to be abridged)
    with tempfile.TemporaryDirectory(prefix="tfd-") as short:
        blocker = Path(short) / "a-file"
        blocker.write_text("")  # root ignores permission bits, but no directory can be made under a file
        result = run("--worker", "a:1", "--format", "dir", "--out", str(blocker / "cfg"))
    assert result.exit_code == 2, result.output
    assert error_line(result) == (f"Error: Invalid value for '--out': cannot write into '{blocker / 'cfg'}': "
                                  "Not a directory; fix: give a directory you can write to\n")


@pytest.mark.parametrize("option, value", [("--chief", "b:2222"), ("--evaluator", "e:1"), ("--format", "env"),
                                           ("--task", "worker:0"), ("--port", "1"), ("--out", "d")])
def test_a_repeated_single_valued_option_is_a_usage_error(option, value):
    result = run("--worker", "a:2222", option, value, option, value)
    assert result.exit_code == 2
    expected = f"Error: Option '{option}' was given 2 times; it takes one value; fix: give it once\n"
    assert error_line(result) == expected


def test_repeated_flag_is_a_usage_error_and_multiple_options_still_repeat():
    result = run("--workers", "1", "--hosts", "a", "--with-chief", "--with-chief")
    assert result.exit_code == 2
    assert "Option '--with-chief' was given 2 times; it is a flag" in error_line(result)
    repeated = run("--worker", "a:1", "--worker", "b:1", "--ps", "c:1", "--ps", "d:1", "--chief", "e:1")
    assert repeated.exit_code == 0


def test_task_lists_in_tf_config_without_cluster_are_invalid():
    text = json.dumps({**TRAINING, "task": {"type": "worker", "index": 0}})
    sources = ((["validate"], {"TF_CONFIG": text}, "$TF_CONFIG"), (["validate", "-"], {}, "stdin"))
    for args, env, where in sources:
        with mock.patch.dict(os.environ, env, clear=True):
            result = run(*args, input=text)
        assert result.exit_code == 1, result.output
        assert result.stdout.splitlines()[1] == (
            "  cluster: TF_CONFIG has no 'cluster', so TensorFlow reads an empty cluster; the task lists "
            "'chief', 'worker', 'ps' must go under \"cluster\"; fix: write "
            "{\"cluster\": {\"worker\": [...], ...}, \"task\": {...}}")
        assert result.stdout.startswith(f"{where} is invalid (2 problems):")


def test_validate_reports_one_problem_on_one_line_and_at_most_50(tmp_path):
    result = run("validate", "-", input=b'{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", '
                 b'"index": 0}, "rpc_layer": "grpc+verbs"}')
    assert (result.exit_code, result.stdout) == (
        1, "stdin is invalid: rpc_layer: is 'grpc+verbs'; tfdist supports only 'grpc' (the layer "
           "TensorFlow's servers speak by default); fix: remove \"rpc_layer\" or write "
           "\"rpc_layer\": \"grpc\"\n")
    bad = json.dumps({"cluster": {"worker": [f"bad_{i}:1" for i in range(200)]},
                      "task": {"type": "worker", "index": 0}})
    lines = run("validate", "-", input=bad).stdout.splitlines()
    assert lines[0] == "stdin is invalid (200 problems):" and len(lines) == 52
    assert lines[-1] == "  ... and 150 more (fix the ones above first)"


def test_cluster_file_with_keys_tfdist_would_drop_is_refused(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"cluster": TRAINING, "task": {"type": "worker", "index": 0},
                                "rpc_layer": "grpc"}))
    result = run("--file", str(path))
    assert result.exit_code == 2
    assert f"{path}.rpc_layer: key 'rpc_layer' is not used" in error_line(result)


@pytest.mark.parametrize(
    "args, text",
    [
        (["--workers", str(10 ** 30), "--hosts", "a"],
         "Invalid value for '--workers': a number of 31 digits is not in the range 0<=x<=10000 (tfdist's "
         "limit is 10,000 tasks per cluster); fix: use 0 to 10,000"),
        (["--workers", "1", "--ps-count", "1000000000", "--hosts", "a"],
         "Invalid value for '--ps-count': 1000000000 is not in the range 0<=x<=10000"),
        (["--workers", "6000", "--ps-count", "5000", "--hosts", "a", "--with-chief"],
         "--workers, --ps-count, --with-chief and --with-evaluator: asks for 11,001 tasks; tfdist's limit "
         "is 10,000 per cluster"),
        (["--workers", "1", "--hosts", "r[0-100000]n[0-100000]"],
         "Invalid value for '--hosts': 'r[0-100000]n[0-100000]': the hostlist is too large: it names more "
         "than 10,000 hosts"),
        (["--worker", "a:" + "9" * 5000], "has a port of 5000 digits; ports are 1-65535"),
        (["--worker", "a:1", "--task", "worker:" + "9" * 5000],
         "which is not a whole number >= 0 of at most 18"),
    ],
)
def test_resource_limits_are_usage_errors_naming_the_option(args, text):
    result = run(*args)
    assert result.exit_code == 2, result.output
    message = error_line(result)
    assert text in message and message.count("\n") == 1 and len(message) < 600


def test_the_limit_itself_is_accepted():
    result = run("--workers", "10000", "--hosts", "n[1-100]", "--task", "worker:9999")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["cluster"]["worker"]) == 10_000


# --- issue: hostile bytes in files, a silently ignored --port, BOMs, one wording for fixes ----------------

BOM = b"\xef\xbb\xbf"
BOM_TF_CONFIG = BOM + VALID.encode()


@pytest.mark.parametrize("content", [b"worker: [a:1]\nchief: [c\x00:1]\n", b"worker: [a:1]\n\x1b[31m: 1\n"])
def test_a_control_character_in_a_yaml_file_is_one_line_naming_the_file(tmp_path, content):
    path = tmp_path / "nul.yaml"
    path.write_bytes(content)
    where = "line 2 column 10" if b"\x00" in content else "line 2 column 1"
    result = run("--file", str(path))
    message = error_line(result)
    assert result.exit_code == 2 and message.count("\n") == 1, result.output
    assert message.startswith(f"Error: Invalid value for '--file': {path} is not a valid cluster file: {path}: "
                              f"is not valid YAML: it holds the control character U+00")
    assert f"at {where}" in message and "; fix: " in message
    result = run("validate", str(path))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"{path} is invalid: {path}: is not valid YAML: it holds the control character")
    assert f"at {where}" in line and "; fix: " in line


@pytest.mark.parametrize("args", [
    ["--worker", "c:3", "--format", "env"],
    ["--chief", "c:3", "--worker", "w:3"],
    ["--file", "{file}"],
])
def test_port_is_refused_where_it_would_be_ignored(tmp_path, args):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("worker: [a:1]\n")
    result = run(*[a.format(file=cluster) for a in args], "--port", "5000")
    message = error_line(result)
    assert result.exit_code == 2, result.output
    assert message.startswith("Error: Invalid value for '--port': 5000 is only used by the --workers/--hosts "
                              "shorthand and --format slurm")
    assert "; fix: " in message and message.count("\n") == 1
    assert "export" not in result.stdout and "TF_CONFIG" not in result.stdout


def test_port_still_works_with_the_shorthand_and_slurm():
    assert json.loads(run("--workers", "1", "--hosts", "a", "--port", "5000").stdout)["worker:0"]["cluster"] == {
        "worker": ["a:5000"]}
    env = {"SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_NTASKS_PER_NODE": "1"}
    with mock.patch.dict(os.environ, env, clear=True):
        result = run("--format", "slurm", "--port", "5000")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cluster"] == {"worker": ["n1:5000"]}


def _bom_message(where: str) -> str:
    return (f"{where} is invalid: TF_CONFIG: starts with a UTF-8 byte-order mark (BOM), which TensorFlow's "
            "TF_CONFIG reader refuses; fix: save it as UTF-8 without a BOM\n")


def test_a_bom_is_refused_from_every_source(tmp_path):
    for name in ("bom.yaml", "bom.yml", "bom.json", "bom.txt"):
        path = tmp_path / name
        path.write_bytes(BOM_TF_CONFIG)
        result = run("validate", str(path))
        assert result.exit_code == 1, (name, result.output)
        field = "TF_CONFIG" if name.endswith(".json") else str(path)  # YAML names the file it parsed
        assert result.stdout == _bom_message(str(path)).replace("TF_CONFIG: ", f"{field}: ", 1), result.stdout
    result = run("validate", "-", input=BOM_TF_CONFIG)
    assert result.exit_code == 1 and result.stdout == _bom_message("stdin")
    with mock.patch.dict(os.environ, {"TF_CONFIG": BOM_TF_CONFIG.decode()}, clear=True):
        result = run("validate")
    assert result.exit_code == 1 and result.stdout == _bom_message("$TF_CONFIG")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_bytes(BOM + b"worker: [a:1]\n")
    message = error_line(run("--file", str(cluster)))
    assert message == (f"Error: Invalid value for '--file': {cluster} is not a valid cluster file: {cluster}: "
                       "starts with a UTF-8 byte-order mark (BOM), which TensorFlow's TF_CONFIG reader "
                       "refuses; fix: save it as UTF-8 without a BOM\n")


def test_without_the_bom_the_same_text_is_valid(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_bytes(BOM_TF_CONFIG[3:])
    assert run("validate", str(path)).exit_code == 0


@pytest.mark.parametrize("args", [
    [], ["--worker", "a:1", "validate"], ["--worker", "a:1", "--out", "d"], ["--worker", "a:1", "--format", "dir"],
    ["--worker", "a:1", "--k8s-image", "i"], ["--worker", "a:1", "--format", "k8s"],
    ["--worker", "a:1", "--format", "k8s", "--k8s-image", "i", "--task", "worker:0"],
    ["--worker", "a:1", "--format", "k8s", "--k8s-image", "i", "--k8s-command", "'a"],
    ["--format", "slurm", "--worker", "a:1"], ["--worker", "a:1", "--workers", "1"],
    ["--workers", "1"], ["--hosts", "a"], ["--workers", "1", "--hosts", "a,,b"], ["--workers", "1", "--hosts", "a_b"],
    ["--workers", "3", "--hosts", "a", "--port", "65534"],
])
def test_every_error_ends_with_fix_never_hint(args):
    message = error_line(run(*args))
    assert "hint:" not in message and "; fix: " in message, message


def test_validate_unset_env_says_fix():
    with mock.patch.dict(os.environ, {}, clear=True):
        message = error_line(run("validate"))
    assert message.startswith("Error: TF_CONFIG is not set; fix: export TF_CONFIG=")


def test_warnings_say_fix_never_hint():
    result = run("--worker", "0.0.0.0:1", "--worker", "localhost:2", "--worker", "node1:3")
    assert result.exit_code == 0
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning: ")]
    assert len(warnings) == 2 and all("; fix: " in w and "hint" not in w for w in warnings), warnings


# --- issue 34: counts given to address options, numbers outside ASCII ----------------------------------------

@pytest.mark.parametrize("args, option, fix", [
    (["--workers", "2", "--ps", "1"], "--ps", "for 1 ps task(s) use --ps-count 1 with the shorthand --workers N "
     "--hosts h1,h2 (and --with-chief), or give each ps's address: --ps node1:2222"),
    (["--worker", "3"], "--worker", "for 3 worker(s) use --workers 3 --hosts h1,h2, or give each worker's "
     "address: --worker node1:2222"),
    (["--chief", "1"], "--chief", "for a chief use --with-chief with the shorthand --workers N --hosts h1,h2, or "
     "give its address: --chief node1:2222"),
    (["--worker", "a:1", "--evaluator", " 0"], "--evaluator", "for an evaluator use --with-evaluator with the "
     "shorthand --workers N --hosts h1,h2, or give its address: --evaluator node1:2222"),
    (["--ps", "9" * 5000], "--ps", "for N ps task(s) use --ps-count N"),
])
def test_a_count_given_to_an_address_option_names_the_count_option(args, option, fix):
    """`tf-config --workers 2 --ps 1` suggested '1:2222': --ps is a count in launch and advise but an address
    here. The flags stay; the error says which option takes the count."""
    result = run(*args)
    assert result.exit_code == 2
    text = error_line(result)
    assert text.startswith(f"Error: Invalid value for '{option}': ") and text.count("\n") == 1
    assert f"is a number, but {option} takes a task's address, HOST:PORT; fix: {fix}" in text
    assert ":2222'" not in text and len(text) < 400


@pytest.mark.parametrize("args, option, message", [
    (["--workers", "1", "--hosts", "a", "--port", "٢٢٢٢"], "--port",
     "'٢٢٢٢' holds '٢' (U+0662 ARABIC-INDIC DIGIT TWO), which is not ASCII; numbers are read in ASCII only; "
     "fix: type it as '2222'"),
    (["--worker", "h:２２２２"], "--worker",
     "'h:２２２２' has port '２２２２', which is not a number: it holds '２' (U+FF12 FULLWIDTH DIGIT TWO), which is not "
     "ASCII; numbers are read in ASCII only; fix: type it as 'h:2222'"),
    (["--workers", "1", "--hosts", "a", "--task", "worker:٠"], "--task",
     "'worker:٠' has index '٠', which is not a whole number: it holds '٠' (U+0660 ARABIC-INDIC DIGIT ZERO), which "
     "is not ASCII; numbers are read in ASCII only; fix: type it as 'worker:0'"),
    (["--workers", "١", "--hosts", "a"], "--workers", "'١' holds '١' (U+0661 ARABIC-INDIC DIGIT ONE)"),
    (["--workers", "2", "--hosts", "a", "--ps-count", "1\u00a0", "--with-chief"], "--ps-count",
     "holds '\\xa0' (U+00A0 NO-BREAK SPACE), which is not ASCII"),
])
def test_numbers_outside_ascii_are_refused_naming_the_option(args, option, message):
    """int() reads '٢٢٢٢' as 2222: `--port ٢٢٢٢` was taken as port 2222 (click's IntRange)."""
    text = error_line(run(*args))
    assert text.startswith(f"Error: Invalid value for '{option}': ") and message in text, text


@settings(database=None, max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["--port", "--workers", "--ps-count", "--task"]),
       st.text(st.one_of(st.sampled_from("0123456789 :worke"), st.characters(categories=["Nd", "Zs"])),
               min_size=1, max_size=6))
def test_fuzzed_numbers_are_ascii_or_refused(option, text):
    """Issue 34, a fuzzer over digits of every script and Unicode spaces: accepted only when ASCII."""
    args = {"--port": ["--workers", "1", "--hosts", "a", "--port", text],
            "--workers": ["--workers", text, "--hosts", "a"],
            "--ps-count": ["--workers", "1", "--hosts", "a,b", "--with-chief", "--ps-count", text],
            "--task": ["--workers", "1", "--hosts", "a", "--task", text]}[option]
    result = run(*args)
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        assert text.isascii(), (option, text)
    else:
        assert result.exit_code == 2
        line = error_line(result)
        assert "; fix: " in line
        number = text.split(":")[1] if option == "--task" and text.count(":") == 1 else text
        if option != "--task" or text.count(":") == 1:  # a task that is not TYPE:INDEX has no number
            assert ("which is not ASCII" in line) is not number.isascii(), line
        if not number.isascii():
            assert line.startswith(f"Error: Invalid value for '{option}': ")
