"""Fuzzing the click commands with hostile and random input (issue 8 item 10, issue 9 items 6-7).

The oracle never asks tfdist: each input is built together with the exit code the spec gives it
(docs/tf-config.md): ``validate`` exits 0 for a valid TF_CONFIG and 1 for an invalid one, generation
exits 0 or 2; an error is one line (validate: ``<source> is invalid: <problem>``; generation:
``Error: ...``) and never a traceback. The cases found by the first fuzzer are explicit examples.
The ``slow`` variant re-reads every accepted TF_CONFIG with TensorFlow's own resolver.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from unittest import mock

import pytest

from support import examples

hypothesis = pytest.importorskip("hypothesis")
from click.testing import CliRunner  # noqa: E402
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tfdist.cli.main import cli  # noqa: E402

MIB = 1024 * 1024
LIMIT = 10_000
FUZZ = settings(database=None, deadline=None, max_examples=examples(150),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BILLION_LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip([None, "a", "b", "c", "d", "e", "f", "g"], "abcdefgh"))


@dataclass(frozen=True)
class Case:
    """One input to ``validate`` and the exit code the spec gives it; `one_line`: a single problem."""

    data: bytes
    exit_code: int
    one_line: bool
    tf_config: dict | None = None  # the valid TF_CONFIG, for the TensorFlow re-check


def _json(obj) -> bytes:
    return json.dumps(obj).encode()


# --- random valid TF_CONFIGs, by construction --------------------------------------------------------------

@st.composite
def valid_tf_configs(draw) -> dict:
    ps = draw(st.integers(0, 3))
    chief = ps > 0 or draw(st.booleans())
    workers = draw(st.integers(1 if ps or not chief else 0, 5))
    names = ["node1", "10.0.0.7", "[fd00::5]", "Host-2.example.com", "localhost"]
    hosts = draw(st.lists(st.sampled_from(names),
                          min_size=1, max_size=3, unique=True))
    # distinct ports make every endpoint distinct, whatever the hosts
    ports = iter(draw(st.lists(st.integers(1, 65535), min_size=12, max_size=12, unique=True)))
    cluster = {}
    for task_type, n in (("chief", int(chief)), ("worker", workers), ("ps", ps)):
        if n:
            cluster[task_type] = [f"{draw(st.sampled_from(hosts))}:{next(ports)}" for _ in range(n)]
    tasks = [(t, i) for t, items in cluster.items() for i in range(len(items))] + [("evaluator", 0)]
    task_type, index = draw(st.sampled_from(tasks))
    config = {"cluster": cluster, "task": {"type": task_type, "index": index}}
    if draw(st.booleans()):
        config["rpc_layer"] = "grpc"
    return config


# each mutation: (name, function of a valid config -> (bytes, one_line)); every result is invalid
def _drop_cluster(c):
    return _json({**c["cluster"], "task": c["task"]}), False


def _repeat_task_key(c):
    text = json.dumps(c)
    return (text[:-1] + ', "task": ' + json.dumps(c["task"]) + "}").encode(), True


def _bad_rpc_layer(c):
    return _json({**c, "rpc_layer": "grpc+verbs"}), True


def _giant_port(c):
    return _json({**c, "cluster": {**c["cluster"], "worker": ["node1:" + "9" * 5000]}}), False


def _giant_index_number(c):
    text = json.dumps({**c, "task": {"type": c["task"]["type"], "index": 0}})
    return text.replace('"index": 0', '"index": ' + "9" * 5000).encode(), True


def _evaluator_in_cluster(c):
    return _json({**c, "cluster": {**c["cluster"], "evaluator": ["node9:1"]}}), False


def _unknown_key(c):
    return _json({**c, "clustr": {}}), True


def _same_endpoint_twice(c):
    return _json({**c, "cluster": {**c["cluster"], "worker": ["localhost:7", "127.0.0.1:7"]}}), False


def _deep(c):
    return b"[" * 100_000 + _json(c) + b"]" * 100_000, True


def _not_utf8(c):
    return _json(c)[:-1] + b', "x": "\xff\xfe"}', True


def _too_large(c):
    return _json(c) + b" " * MIB, True


def _bom(c):
    return b"\xef\xbb\xbf" + _json(c), True  # TensorFlow's resolver refuses it: "Unexpected UTF-8 BOM"


def _too_many_workers(c):
    return _json({**c, "cluster": {**c["cluster"], "worker": [f"w{i}:1" for i in range(LIMIT + 1)]}}), False


MUTATIONS = [_drop_cluster, _repeat_task_key, _bad_rpc_layer, _giant_port, _giant_index_number,
             _evaluator_in_cluster, _unknown_key, _same_endpoint_twice, _deep, _not_utf8, _too_large,
             _too_many_workers, _bom]


@st.composite
def cases(draw) -> Case:
    config = draw(valid_tf_configs())
    mutation = draw(st.sampled_from([None, *MUTATIONS]))
    if mutation is None:
        return Case(_json(config), 0, True, config)
    data, one_line = mutation(config)
    return Case(data, 1, one_line)


HOSTILE = [
    Case(b'{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": ' + b"9" * 5000 + b"}}",
         1, True),
    Case(b"[" * 500_000 + b"]" * 500_000, 1, True),
    Case(b'{"a":' * 200_000 + b"1" + b"}" * 200_000, 1, True),
    Case(b"\xff\xfe\x00", 1, True),
    Case(b" " * (MIB + 1), 1, True),
    Case(b"", 1, True),
    Case(b'{"chief": ["a:1"], "worker": ["b:1"], "task": {"type": "worker", "index": 0}}', 1, False),
    Case(b'{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "cluster": {}}', 1, True),
    Case(b'\xef\xbb\xbf{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}', 1, True),
]


def _check_validate(result, case: Case, where: str) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == case.exit_code, result.output[:2000]
    lines = result.stdout.splitlines()
    if case.exit_code == 0:
        assert lines[0].startswith("TF_CONFIG is valid: task ")
    elif case.one_line:
        assert len(lines) == 1 and lines[0].startswith(f"{where} is invalid: "), lines[:5]
        assert "; fix: " in lines[0] and len(lines[0]) < 1000
    else:
        assert lines[0].startswith(f"{where} is invalid")
        assert all(line.startswith("  ") and "; fix: " in line for line in lines[1:]), lines[:5]


def _run_timed(args, **kwargs):
    start = time.perf_counter()
    result = CliRunner().invoke(cli, args, prog_name="tfdist", **kwargs)
    assert time.perf_counter() - start < 20, "a hang guard; each input takes well under a second"
    return result


@FUZZ
@given(cases())
@example(HOSTILE[0]).via("a 5,000-digit index")
@example(HOSTILE[1]).via("deeply nested JSON")
@example(HOSTILE[2]).via("deeply nested objects")
@example(HOSTILE[3]).via("invalid UTF-8")
@example(HOSTILE[4]).via("more than 1 MiB")
@example(HOSTILE[5]).via("empty stdin")
@example(HOSTILE[6]).via("task lists outside 'cluster'")
@example(HOSTILE[7]).via("a repeated key")
@example(HOSTILE[8]).via("a UTF-8 byte-order mark")
def test_validate_stdin(case):
    _check_validate(_run_timed(["tf-config", "validate", "-"], input=case.data), case, "stdin")


@FUZZ
@given(cases().filter(lambda c: b"\x00" not in c.data))
def test_validate_tf_config_variable(case):
    # os.environ holds undecodable bytes as lone surrogates, as Python does for the real environment
    text = case.data.decode("utf-8", "surrogateescape")
    with mock.patch.dict(os.environ, {"TF_CONFIG": text}, clear=True):
        result = _run_timed(["tf-config", "validate"])
    if not text.strip():  # a blank TF_CONFIG is "empty", still one line
        case = Case(case.data, 1, True)
    _check_validate(result, case, "$TF_CONFIG")


# --- cluster files: YAML and JSON, for `validate FILE` (exit 1) and `--file` (exit 2) ---------------------

FILES = [
    ("bomb.yaml", BILLION_LAUGHS),
    ("dup.yaml", "worker: [a:1]\nworker: [b:1]\n"),
    ("deep.yaml", "worker: " + "[" * 200_000 + "]" * 200_000 + "\n"),
    ("deep-block.yaml", "".join(" " * i + "-\n" for i in range(0, 400, 2))),
    ("huge.yaml", "worker: [" + ", ".join(f"w{i}:1" for i in range(LIMIT + 1)) + "]\n"),
    ("big.yaml", "worker: [" + ", ".join(["a:1"] * 300_000) + "]\n"),
    ("digits.yaml", "worker: [a:1]\nx: " + "9" * 5000 + "\n"),
    ("extra.json", '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "extra": 1}'),
    ("utf8.yaml", b"worker: [\xff]\n"),
    ("nul.yaml", b"worker: [a:1]\nchief: [c\x00:1]\n"),  # PyYAML's ReaderError was a traceback
    ("esc.yaml", b"worker: [a:1]\n\x1b[31m: 1\n"),
    ("bom.yaml", b'\xef\xbb\xbf{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}'),
    ("bom-cluster.yaml", b"\xef\xbb\xbfworker: [a:1]\n"),
    ("bom.json", b'\xef\xbb\xbf{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}'),
]


@FUZZ
@given(st.sampled_from(FILES), st.booleans())
def test_hostile_cluster_files(file, as_option):
    name, content = file
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        args = ["tf-config", "--file", path] if as_option else ["tf-config", "validate", path]
        result = _run_timed(args)
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    if as_option:
        assert result.exit_code == 2
        (error,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
        assert error.startswith(f"Error: Invalid value for '--file': {path} is not a valid cluster file: ")
        assert result.output.rstrip("\n").endswith(error)  # the problem is on that one line
    else:
        assert result.exit_code == 1
        assert len(result.stdout.splitlines()) == 1 and result.stdout.startswith(f"{path} is invalid: ")


@FUZZ
@given(st.sampled_from(FILES))
def test_valid_cluster_files_still_pass(file):
    name = file[0].rsplit(".", 1)[0] + "-ok.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write("chief: [a:1]\nworker: [b:1, 'b:2']\nps: [c:1]\n")
        assert _run_timed(["tf-config", "--file", path]).exit_code == 0
        assert _run_timed(["tf-config", "validate", path]).exit_code == 0


# --- generation options: 0 or 2, nothing else --------------------------------------------------------------

SINGLE_VALUED = {"--chief": "h9:9", "--evaluator": "h8:8", "--format": "env", "--task": "worker:0",
                 "--port": "3000", "--workers": "1", "--hosts": "x", "--ps-count": "0", "--k8s-name": "n"}


@st.composite
def generation_args(draw) -> tuple[list[str], int, str]:
    workers = draw(st.integers(1, 4))
    args = [a for i in range(workers) for a in ("--worker", f"w{i}:2222")]
    if draw(st.booleans()):
        args += ["--chief", "c:2222"]
    expected, named = 0, ""
    hostile = draw(st.sampled_from([None, "repeat", "port", "task", "workers", "ps-count", "hosts", "out",
                                    "fixed-port"]))
    if hostile == "repeat":
        option = draw(st.sampled_from(sorted(SINGLE_VALUED)))
        args += [option, SINGLE_VALUED[option], option, SINGLE_VALUED[option]]
        expected, named = 2, f"Option '{option}' was given {args.count(option)} times"
    elif hostile == "port":
        args += ["--worker", "w9:" + "9" * draw(st.integers(6, 5000))]
        expected, named = 2, "Invalid value for '--worker'"
    elif hostile == "task":
        args += ["--task", "worker:" + "9" * draw(st.integers(19, 5000))]
        expected, named = 2, "Invalid value for '--task'"
    elif hostile in ("workers", "ps-count", "hosts"):
        big = draw(st.sampled_from([str(LIMIT + 1), str(10 ** 9), str(10 ** 30), "9" * 5000]))
        args = {"workers": ["--workers", big, "--hosts", "a"],
                "ps-count": ["--workers", "1", "--ps-count", big, "--hosts", "a", "--with-chief"],
                "hosts": ["--workers", "1", "--hosts", draw(st.sampled_from(
                    ["r[0-100000]n[0-100000]", "n[1-10001]", "n[0-" + "9" * 5000 + "]"]))]}[hostile]
        expected, named = 2, f"Invalid value for '--{hostile}'"
    elif hostile == "fixed-port":  # explicit addresses carry their ports: --port would be ignored
        args += ["--port", str(draw(st.integers(1, 65535)))]
        expected, named = 2, "Invalid value for '--port'"
    elif hostile == "out":
        args += ["--format", "dir", "--out", "<under-a-file>"]
        expected, named = 2, "Invalid value for '--out': cannot write into"
    draw(st.randoms()).shuffle(pairs := [args[i:i + 2] for i in range(0, len(args), 2)])
    return [a for pair in pairs for a in pair], expected, named


@FUZZ
@given(generation_args())
@example((["--workers", str(10 ** 30), "--hosts", "a"], 2, "Invalid value for '--workers'")).via(
    "--workers 10**30")
@example((["--workers", "1", "--ps-count", "1000000000", "--hosts", "a", "--with-chief"], 2,
          "Invalid value for '--ps-count'")).via("--ps-count 1e9")
@example((["--workers", "1", "--hosts", "r[0-100000]n[0-100000]"], 2, "Invalid value for '--hosts'")).via(
    "a hostlist of 10**10 hosts")
@example((["--chief", "a:2222", "--chief", "b:2222"], 2, "Option '--chief' was given 2 times")).via(
    "--chief twice")
@example((["--worker", "a:2222", "--format", "dir", "--out", "<under-a-file>"], 2,
          "Invalid value for '--out': cannot write into")).via("unwritable --out")
@example((["--worker", "c:3", "--port", "5000", "--format", "env"], 2, "Invalid value for '--port'")).via(
    "--port beside explicit addresses")
def test_generation(case):
    args, expected, named = case
    with tempfile.TemporaryDirectory() as tmp:
        blocker = os.path.join(tmp, "file")
        open(blocker, "w").close()  # root ignores permission bits; a directory under a file is unwritable
        args = [os.path.join(blocker, "out") if a == "<under-a-file>" else a for a in args]
        result = _run_timed(["tf-config", *args])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == expected, (args[:8], result.output[-600:])
    if expected == 2:
        (error,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
        assert result.output.rstrip("\n").endswith(error) and len(error) < 1000
        assert error.startswith(f"Error: {named}"), error


def test_slurm_task_count_is_bounded():
    env = {"SLURM_JOB_NODELIST": "a", "SLURM_NTASKS": "1000000000", "SLURM_PROCID": "0",
           "SLURM_NTASKS_PER_NODE": "1000000000"}
    with mock.patch.dict(os.environ, env, clear=True):
        result = _run_timed(["tf-config", "--format", "slurm"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: cannot build TF_CONFIG from SLURM's variables: SLURM_NTASKS: is 1,000,000,000; tfdist's "
        "limit is 10,000 tasks per cluster; fix: run at most 10,000 tasks")


# --- the slow variant: TensorFlow reads every accepted TF_CONFIG as tfdist does ----------------------------

@pytest.mark.slow
@settings(database=None, deadline=None, max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(valid_tf_configs())
def test_accepted_tf_configs_resolve_identically_in_tensorflow(config):
    tf = pytest.importorskip("tensorflow")
    from tfdist.cluster import TFConfig

    text = json.dumps(config)
    with mock.patch.dict(os.environ, {"TF_CONFIG": text}, clear=True):
        result = _run_timed(["tf-config", "validate"])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        resolved = (resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id,
                    resolver.rpc_layer)
    assert result.exit_code == 0, result.output
    parsed = TFConfig.parse(text)
    assert resolved == ({t: list(a) for t, a in parsed.cluster.items()}, parsed.task_type, parsed.task_index,
                        parsed.rpc_layer)
