"""Fuzzing ``tfdist advise`` and ``tfdist launch``'s argument checking with hostile and random input.

The oracle never asks tfdist: each input is built together with the exit code it must give. A valid
input is drawn inside every documented bound (docs/advise.md, ``tfdist launch --help``); an invalid one
is a valid input with exactly one thing made wrong (a count past its limit, NaN, an empty host list,
a rate below 1 kbit/s, ...), and names the option the error must name. Every case asserts no
traceback, a bounded time, one short ``Error:`` line for exit 2, and no exit 0 for wrong input; a
valid ``advise --json`` must parse with a strict JSON parser (no NaN or Infinity) into finite numbers.

``launch`` never starts anything here: the functions that would start processes (or probe hosts) are
replaced by recorders, so a valid input shows which launcher it reached and with what, and a guard
fails the test if a process is started at all. No TensorFlow is imported.
"""
from __future__ import annotations

import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from unittest import mock

import pytest

from support import SCRIPTS, examples

hypothesis = pytest.importorskip("hypothesis")
from click.testing import CliRunner  # noqa: E402
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tfdist.cli import launch as launch_module  # noqa: E402
from tfdist.cli.main import cli  # noqa: E402

FUZZ = settings(database=None, deadline=None, max_examples=examples(500),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HANG_GUARD_S = 30  # each input takes well under a second; this only catches hangs
MAX_ERROR = 1000  # characters of an error line

# The documented bounds (docs/advise.md, the options' help), written out here rather than imported.
ADVISE_MAX_WORKERS = 100_000
PS_MODEL_SIZE = 10**6  # worker hosts x workers with ps tasks
LAUNCH_MAX_TASKS = 10_000
MIN_BITS, MAX_BITS = 1e3, 100e12  # link rates, bits/s


@dataclass(frozen=True)
class Case:
    """Arguments, the exit code they must give, and for exit 2 the start of the ``Error:`` line."""

    args: tuple[str, ...]
    exit_code: int
    error: str = ""
    path: tuple = ()  # launch: the launcher a valid input reaches, with what
    contains: str = ""  # exit 2: also somewhere in the Error line
    extra: dict = field(default_factory=dict, compare=False)


def _run(args) -> object:
    start = time.perf_counter()
    result = CliRunner().invoke(cli, list(args), prog_name="tfdist")
    assert time.perf_counter() - start < HANG_GUARD_S, "a hang guard"
    return result


def _check_common(result, case: Case) -> None:
    shown = (list(case.args)[:14], result.output[-800:])
    assert "Traceback" not in result.output, shown
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == case.exit_code, shown
    if case.exit_code == 2:
        errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1, shown
        assert result.output.rstrip("\n").endswith(errors[0]), shown
        assert len(errors[0]) < MAX_ERROR, errors[0][:300]
        assert errors[0].startswith(f"Error: {case.error}"), (errors[0][:300], case.error)
        assert case.contains in errors[0], (errors[0][:300], case.contains)


def _shuffled(draw, pairs: list[list[str]]) -> list[str]:
    draw(st.randoms(use_true_random=False)).shuffle(pairs)
    return [word for pair in pairs for word in pair]


# --- advise: valid inputs by construction ----------------------------------------------------------------

_BIT_UNITS = ["bit", "bits", "bit/s", "bps", "b/s", "Bit", "BIT/S"]
_BYTE_UNITS = ["B/s", "Bps", "byte/s", "bytes/s"]
_PREFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30}


@st.composite
def rate_texts(draw, low_bits: float = 2 * MIN_BITS, high_bits: float = MAX_BITS / 2) -> str:
    """A rate between ``low_bits`` and ``high_bits`` bits/s, written in a random unit."""
    bits = 10 ** draw(st.floats(math.log10(low_bits), math.log10(high_bits)))
    prefix = draw(st.sampled_from(sorted(_PREFIXES)))
    in_bytes = draw(st.booleans())
    number = bits / _PREFIXES[prefix] / (8 if in_bytes else 1)
    unit = draw(st.sampled_from(_BYTE_UNITS if in_bytes else _BIT_UNITS))
    written_prefix = prefix.upper() if in_bytes else draw(st.sampled_from([prefix, prefix.upper()]))
    if unit.lower() in ("bps", "b/s") and not in_bytes:
        unit = unit.lower()  # a lower-case b is bits; a capital B with a prefix would be bytes
    space = draw(st.sampled_from(["", " "]))
    return f"{number:.6g}{space}{written_prefix}{unit}"


def _finite_text(draw, low: float, high: float) -> str:
    value = draw(st.floats(low, high, allow_nan=False, allow_infinity=False))
    return draw(st.sampled_from([repr(value), f"{value:g}" if low < float(f"{value:g}") <= high else repr(value)]))


@st.composite
def advise_inputs(draw) -> dict:
    """A valid description: option -> text, plus the facts the mutations need."""
    ps = draw(st.integers(0, 3))
    size = draw(st.sampled_from(["small"] * 8 + ["large"]))
    if size == "small":
        workers = draw(st.integers(1, 64))
    elif ps:
        workers = draw(st.integers(65, 1000))
    else:
        workers = draw(st.integers(65, ADVISE_MAX_WORKERS))
    per_host = draw(st.integers(1, max(1, min(workers, 16))))
    hosts = -(-workers // per_host)
    options = {"--workers": str(workers), "--batch-size": str(draw(st.integers(1, 4096))),
               "--step-ms": _finite_text(draw, 0.002, 1e8), "--ps": str(ps)}
    if draw(st.booleans()):
        options["--workers-per-host"] = str(per_host)
    else:
        per_host, hosts = 1, workers
        if ps and hosts * workers > PS_MODEL_SIZE:
            options["--ps"], ps = "0", 0
    params = draw(st.integers(1, 10**12))
    written = [str(params), f"{params:,}"] + ([f"{params / 1e6:.3f}M"] if params >= 10**4 else [])
    options["--params"] = draw(st.sampled_from(written))
    if hosts <= 16 and draw(st.booleans()):
        options["--bandwidth"] = ",".join(draw(rate_texts()) for _ in range(hosts))
    else:
        options["--bandwidth"] = draw(rate_texts())
    if workers <= 64 and draw(st.booleans()):
        base = draw(st.floats(1e-3, 1e3))
        options["--worker-speeds"] = ",".join(f"{base * draw(st.floats(0.01, 100)):.6g}" for _ in range(workers))
    optional = {"--latency-ms": lambda: _finite_text(draw, 0, 10_000),
                "--overlap": lambda: _finite_text(draw, 0, 1),
                "--ps-overhead-ms": lambda: _finite_text(draw, 0, 1e6),
                "--allreduce-overhead-ms": lambda: _finite_text(draw, 0, 1e6),
                "--ps-epochs-factor": lambda: _finite_text(draw, 1e-3, 1e6),
                "--dtype-bytes": lambda: str(draw(st.integers(1, 16))),
                "--ps-bandwidth": lambda: draw(rate_texts()),
                "--intra-host-bandwidth": lambda: draw(rate_texts()),
                "--ps-placement": lambda: draw(st.sampled_from(["separate", "colocated"]))}
    for flag in draw(st.lists(st.sampled_from(sorted(optional)), unique=True, max_size=5)):
        options[flag] = optional[flag]()
    return {"options": options, "workers": workers, "hosts": hosts, "ps": ps}


# --- advise: one thing made wrong ----------------------------------------------------------------------------

_HUGE = ["100001", "1000000000", str(10**30), "9" * 5000, "-1", "0", "1.5", "x", ""]
_NOT_FINITE = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999"]
_BAD_RATES = ["1e-300bit", "8bit", "999bit", "0gbit", "0.0001kbit", "200tbit", "1e400gbit", "nan", "inf gbit",
              "50", "fast", "10GBPS", "", "1gbit" * 20]


def _float_mutation(draw, flag: str, below: list[str], above: list[str]) -> tuple[dict, str]:
    return {flag: draw(st.sampled_from(_NOT_FINITE + below + above + ["x", "1" * 100]))}, f"Invalid value for '{flag}'"


@st.composite
def advise_cases(draw) -> Case:
    facts = draw(advise_inputs())
    options = dict(facts["options"])
    workers, hosts = facts["workers"], facts["hosts"]
    kind = draw(st.sampled_from([None, None, None, "workers", "bandwidth", "bandwidth-count", "speeds-count",
                                 "speeds", "float", "step", "params", "batch", "dtype", "ps-model",
                                 "repeat", "probe-only", "missing", "ps"]))
    error, contains, extra = "", "", []
    if kind == "workers":
        options["--workers"] = draw(st.sampled_from(_HUGE))
        error = "Invalid value for '--workers'"
    elif kind == "ps":
        options["--ps"] = draw(st.sampled_from([h for h in _HUGE if h != "0"]))
        error = "Invalid value for '--ps'"
    elif kind == "bandwidth":
        rates = options["--bandwidth"].split(",")
        rates[draw(st.integers(0, len(rates) - 1))] = draw(st.sampled_from(_BAD_RATES))
        options["--bandwidth"] = ",".join(rates)
        error = "Invalid value for '--bandwidth'"
    elif kind == "bandwidth-count":
        count = draw(st.integers(2, 40).filter(lambda n: n != hosts))
        options["--bandwidth"] = ",".join([draw(rate_texts())] * count)
        error = "Invalid value for '--bandwidth'"
    elif kind == "speeds-count":
        count = draw(st.integers(1, 40).filter(lambda n: n != workers))
        options["--worker-speeds"] = ",".join(["1"] * count)
        error = "Invalid value for '--worker-speeds'"
    elif kind == "speeds":
        speeds = ["1"] * min(workers, 64)
        speeds[draw(st.integers(0, len(speeds) - 1))] = draw(st.sampled_from(
            ["nan", "inf", "-inf", "0", "-1", "1e7", "1e-9", "x", "", "1e999"]))
        if len(speeds) != workers:  # a wrong count would be named first; keep the count right
            options["--workers"] = str(len(speeds))
            options.pop("--workers-per-host", None)
            options["--bandwidth"] = options["--bandwidth"].split(",")[0]
        options["--worker-speeds"] = ",".join(speeds)
        error = "Invalid value for '--worker-speeds'"
    elif kind == "float":
        flag = draw(st.sampled_from(["--latency-ms", "--overlap", "--ps-overhead-ms", "--allreduce-overhead-ms",
                                     "--ps-epochs-factor", "--step-ms"]))
        above = {"--latency-ms": ["10001"], "--overlap": ["1.5", "2"], "--ps-overhead-ms": ["1e7"],
                 "--allreduce-overhead-ms": ["1000001"], "--ps-epochs-factor": ["1e7"],
                 "--step-ms": ["1e10", "2e9"]}[flag]
        below = ["-1", "-1e-9"] + (["0"] if flag in ("--ps-epochs-factor", "--step-ms") else [])
        change, error = _float_mutation(draw, flag, below, above)
        options.update(change)
    elif kind == "step":
        options["--step-ms"] = draw(st.sampled_from(["1e-300", "0", "1e-4", "0.0009"]))
        error = "Invalid value for '--step-ms'"
    elif kind == "params":
        options["--params"] = draw(st.sampled_from(["0", "0.4", "1e30", "nan", "inf", "lots", "-5", "9" * 5000]))
        error = "Invalid value for '--params'"
    elif kind == "batch":
        options["--batch-size"] = draw(st.sampled_from(["0", "1000000001", "9" * 100, "nan", "-3"]))
        error = "Invalid value for '--batch-size'"
    elif kind == "dtype":
        options["--dtype-bytes"] = draw(st.sampled_from(["0", "17", "9" * 50, "4.5"]))
        error = "Invalid value for '--dtype-bytes'"
    elif kind == "ps-model":  # parameter servers over more worker hosts x workers than the model walks
        options.update({"--workers": str(draw(st.integers(1001, 5000))), "--ps": "1", "--bandwidth": "1gbit"})
        for flag in ("--workers-per-host", "--worker-speeds"):
            options.pop(flag, None)
        error = "Invalid value for '--workers'"
    elif kind == "repeat":
        flag = draw(st.sampled_from(sorted(options)))
        extra = [flag, options[flag]]
        error, contains = "Option ", f"'{flag}' was given 2 times" if flag != "--workers-per-host" else f"'{flag}'"
    elif kind == "probe-only":
        extra = draw(st.sampled_from([["--model", "m:f"], ["--hosts", "a:1,b:1"], ["--ssh-port", "22"],
                                      ["--probe-seconds", "2"]]))
        error = f"{extra[0]} applies only to --probe"
    elif kind == "missing":
        flag = draw(st.sampled_from(["--workers", "--params", "--step-ms", "--bandwidth", "--batch-size"]))
        del options[flag]
        error = f"Missing option '{flag}'"
    as_json = draw(st.booleans())
    args = _shuffled(draw, [[k, v] for k, v in options.items()] + ([extra] if extra else []))
    args += ["--json"] if as_json else []
    return Case(("advise", *args), 2 if kind else 0, error, contains=contains, extra={"json": as_json})


def _strict_json(text: str):
    def refuse(constant: str):
        raise AssertionError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def _numbers(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


ADVISE_HOSTILE = [
    Case(("advise", "--workers", "1000000000", "--params", "1M", "--batch-size", "32", "--step-ms", "10",
          "--bandwidth", "1gbit", "--worker-speeds", "1,1"), 2, "Invalid value for '--workers'"),
    Case(("advise", "--workers", "100000", "--params", "1M", "--batch-size", "32", "--step-ms", "10",
          "--bandwidth", "1gbit", "--worker-speeds", "1,1", "--ps", "0"), 2, "Invalid value for '--worker-speeds'"),
    Case(("advise", "--workers", "2", "--params", "1M", "--batch-size", "32", "--step-ms", "10",
          "--bandwidth", "1e-300bit", "--json"), 2, "Invalid value for '--bandwidth'"),
    Case(("advise", "--workers", "2", "--params", "1M", "--batch-size", "32", "--step-ms", "nan",
          "--bandwidth", "1gbit"), 2, "Invalid value for '--step-ms'"),
    Case(("advise", "--workers", "2", "--params", "1M", "--batch-size", "32", "--step-ms", "10",
          "--bandwidth", "1gbit", "--latency-ms", "inf"), 2, "Invalid value for '--latency-ms'"),
    Case(("advise", "--workers", "100000", "--ps", "0", "--params", "10T", "--dtype-bytes", "16",
          "--batch-size", "1000000000", "--step-ms", "0.001", "--bandwidth", "1kbit", "--json"), 0,
         extra={"json": True}),
]


@FUZZ
@given(advise_cases())
@example(ADVISE_HOSTILE[0]).via("1e9 workers (MemoryError building the message)")
@example(ADVISE_HOSTILE[1]).via("100,000 workers: a 200 KB message")
@example(ADVISE_HOSTILE[2]).via("1e-300bit: 0 bit/s and inf ms")
@example(ADVISE_HOSTILE[3]).via("--step-ms nan")
@example(ADVISE_HOSTILE[4]).via("--latency-ms inf")
@example(ADVISE_HOSTILE[5]).via("the widest valid cluster stays finite")
def test_advise(case):
    result = _run(case.args)
    _check_common(result, case)
    if case.exit_code == 0 and case.extra.get("json"):
        data = _strict_json(result.output)
        assert data["recommended"] in ("horovod", "parameter_server", "multi_worker_mirrored")
        assert all(math.isfinite(number) for number in _numbers(data))
        for figures in data["strategies"].values():
            assert figures["step_ms"] > 0 and figures["examples_per_second"] >= 0
            assert 0 <= figures["scaling_efficiency"] <= 1
    elif case.exit_code == 0:
        assert "Recommended: " in result.output
        assert not re.search(r"\b(inf|nan)\b", result.output, flags=re.I), result.output[:2000]


# --- launch: argument checking only ----------------------------------------------------------------------------

# a script that exists: a local launch checks it before starting anything (never run here)
COMMAND = ("--", sys.executable, str(SCRIPTS / "probe_model.py"))
BACKENDS = ("parameter_server", "multi_worker_mirrored", "horovod", "auto")


@st.composite
def host_lists(draw, needed: int) -> tuple[str, list[tuple[str, int]]]:
    """``--hosts`` text with at least ``needed`` slots in all (at most 8 hosts)."""
    assert needed <= 1024, "one host can take the rest"
    count = draw(st.integers(1, 8))
    slots = [draw(st.integers(1, 64)) for _ in range(count)]
    if sum(slots) < needed:
        slots[draw(st.integers(0, count - 1))] += needed - sum(slots)
    names = draw(st.permutations([f"h{i}" for i in range(count)]))
    entries = list(zip(names, slots))
    text = ",".join(f"{h}:{s}" if s != 1 or draw(st.booleans()) else h for h, s in entries)
    return text, entries


@st.composite
def launch_cases(draw) -> Case:
    backend = draw(st.sampled_from(BACKENDS))
    options: dict[str, str] = {}
    flags: list[str] = []
    if backend != "parameter_server" or draw(st.booleans()):
        options["--backend"] = backend
    if draw(st.booleans()):
        options["--grace"] = _finite_text(draw, 0, 3600)
    path: tuple = ()
    hosts = entries = None
    if backend in ("parameter_server", "multi_worker_mirrored"):
        workers = draw(st.one_of(st.integers(1, 16), st.integers(17, 9000)))
        ps = draw(st.integers(1, 3)) if backend == "parameter_server" else 0
        evaluator = backend == "parameter_server" and draw(st.booleans())
        if workers != 2 or draw(st.booleans()):
            options["--workers"] = str(workers)
        if backend == "parameter_server" and (ps != 1 or draw(st.booleans())):
            options["--ps"] = str(ps)
        if evaluator:
            flags.append("--evaluator")
        if workers + ps + evaluator <= 200 and draw(st.booleans()):
            hosts, entries = draw(host_lists(workers + ps + evaluator))
            options["--hosts"] = hosts
            if backend == "parameter_server" and draw(st.booleans()):
                options["--chief-host"] = draw(st.sampled_from([h for h, _ in entries]))
            if draw(st.booleans()):
                options["--ssh-port"] = str(draw(st.integers(1, 65535)))
        if draw(st.booleans()):
            flags.append("--bind-all")
        if backend == "parameter_server" and draw(st.booleans()):
            options["--task-timeout"] = _finite_text(draw, 0, 86_400)
        # multi_worker_mirrored: --ps keeps its default (1), which that launcher does not use
        path = ("tf", backend, workers, ps if backend == "parameter_server" else 1, hosts)
    elif backend == "horovod":
        if draw(st.booleans()):
            hosts, entries = draw(host_lists(1))
            options["--hosts"] = hosts
            slots = sum(s for _, s in entries)
            if draw(st.booleans()):  # elastic
                flags.append("--elastic")
                min_np = draw(st.integers(1, slots))
                options["--min-np"] = str(min_np)
                max_np = draw(st.one_of(st.none(), st.integers(min_np, LAUNCH_MAX_TASKS)))
                if max_np is not None:
                    options["--max-np"] = str(max_np)
                np = draw(st.one_of(st.none(), st.integers(min_np, min(slots, max_np or slots))))
                if np is not None:
                    options["-np"] = str(np)
                ranks = min_np if np is None else np
            else:
                np = draw(st.one_of(st.none(), st.integers(1, slots)))
                if np is not None:
                    options["-np"] = str(np)
                ranks = slots if np is None else np
        else:
            ranks = draw(st.integers(1, LAUNCH_MAX_TASKS))
            if ranks != 2 or draw(st.booleans()):
                options["-np"] = str(ranks)
        if draw(st.booleans()):
            options["--network-interface"] = draw(st.sampled_from(["eth0", "lo", "ib0"]))
        path = ("horovod", ranks, hosts)
    else:  # auto: the probe is replaced; the recorder answers "horovod on the same hosts"
        hosts, entries = draw(host_lists(2))
        slots = sum(s for _, s in entries)
        options.update({"--hosts": hosts, "--model": draw(st.sampled_from(["m:f", "pkg.models:build_model"])),
                        "--batch-size": str(draw(st.integers(1, 10**6)))})
        ps = draw(st.integers(1, max(1, slots - 1)))
        if ps != 1 or draw(st.booleans()):
            options["--ps"] = str(ps)
        if draw(st.booleans()):
            options["--workers"] = str(draw(st.integers(1, max(1, slots - ps))))
        if draw(st.booleans()):
            options["--probe-seconds"] = _finite_text(draw, 0.5, 60)
        if draw(st.booleans()):
            options["--task-timeout"] = _finite_text(draw, 0, 86_400)
        path = ("auto", hosts, int(options.get("--workers", 0)) or None, ps)
    return _mutate_launch(draw, backend, options, flags, path, entries)


def _mutate_launch(draw, backend, options, flags, path, entries) -> Case:
    kinds = [None, None, None, "grace", "count", "repeat", "unknown", "missing-command", "foreign"]
    if backend in ("parameter_server", "auto"):
        kinds += ["task-timeout"]
    if backend == "parameter_server":
        kinds += ["too-many-tasks"]
    if backend != "horovod" or "--hosts" in options:
        kinds += ["empty-hosts", "bad-hosts"]
    if "--hosts" in options and backend in ("parameter_server", "multi_worker_mirrored"):
        kinds += ["few-slots"]
    if "--hosts" in options and backend == "parameter_server":
        kinds += ["empty-chief-host", "empty-ps-hosts"]
    if "--hosts" in options and backend == "horovod" and "--elastic" not in flags:
        kinds += ["np-slots"]
    if backend == "auto":
        kinds += ["model", "probe-seconds", "batch"]
    if backend == "horovod":
        kinds += ["empty-nic", "bad-nic"]
    if backend != "auto" and "--hosts" not in options:
        kinds += ["missing-script"]
    kind = draw(st.sampled_from(kinds))
    command = list(COMMAND)
    error, contains, extra = "", "", []
    if kind == "grace":
        options["--grace"] = draw(st.sampled_from(_NOT_FINITE + ["-1", "3601", "x", "1" * 80]))
        error = "Invalid value for '--grace'"
    elif kind == "task-timeout":
        options["--task-timeout"] = draw(st.sampled_from(_NOT_FINITE + ["-0.5", "86401", "x"]))
        error = "Invalid value for '--task-timeout'"
    elif kind == "count":
        flag = {"parameter_server": draw(st.sampled_from(["--workers", "--ps"])), "multi_worker_mirrored": "--workers",
                "horovod": "-np", "auto": draw(st.sampled_from(["--workers", "--ps"]))}[backend]
        options[flag] = draw(st.sampled_from(["0", "10001", "1000000000", str(10**30), "9" * 5000, "-2", "x", "2.5"]))
        if flag == "-np" and "--elastic" in flags:
            flags.remove("--elastic")
            options.pop("--min-np", None)
            options.pop("--max-np", None)
        error = "Invalid value for '-np' / '--num-proc'" if flag == "-np" else f"Invalid value for '{flag}'"
    elif kind == "too-many-tasks":
        options.update({"--workers": str(draw(st.integers(5001, 10_000))), "--ps": str(draw(st.integers(5000, 10_000)))})
        options.pop("--hosts", None)
        options.pop("--chief-host", None)
        options.pop("--ssh-port", None)
        error = "the cluster has "
    elif kind == "empty-hosts":
        options["--hosts"] = draw(st.sampled_from(["", " ", "\t"]))
        error = "--hosts is empty"
    elif kind == "bad-hosts":
        options["--hosts"] = draw(st.sampled_from(["a:0", "a:x", "a,,b", "a:1,a:1", "a:2000", ",", "a:-1",
                                                   "a b:1", "h" * 300, "-a:1"]))
        options.pop("--chief-host", None)
        error = "--hosts"
    elif kind == "few-slots":
        needed = int(options.get("--workers", 2)) + (int(options.get("--ps", 1)) if backend == "parameter_server"
                                                     else 0) + ("--evaluator" in flags)
        if needed < 2:
            options["--workers"] = "2"
            needed += 1
        options["--hosts"] = f"h0:{needed - 1}"
        options.pop("--chief-host", None)
        error = "the job needs "
    elif kind == "empty-chief-host":
        options["--chief-host"] = draw(st.sampled_from(["", " "]))
        error = "--chief-host is empty"
    elif kind == "empty-ps-hosts":
        options["--ps-hosts"] = draw(st.sampled_from(["", " "]))
        error = "--ps-hosts is empty"
    elif kind == "np-slots":
        slots = sum(s for _, s in entries)
        options["-np"] = str(draw(st.integers(slots + 1, LAUNCH_MAX_TASKS)))
        error = f"-np {options['-np']} needs"
    elif kind == "model":
        options["--model"] = draw(st.sampled_from(["nocolon", ":f", "m:", "a b:c", "", "m:f:g", "1m:f", "m" * 300]))
        error = "Invalid value for '--model'"
    elif kind == "probe-seconds":
        options["--probe-seconds"] = draw(st.sampled_from(_NOT_FINITE + ["0.1", "61", "x"]))
        error = "Invalid value for '--probe-seconds'"
    elif kind == "batch":
        options["--batch-size"] = draw(st.sampled_from(["0", str(10**10), "9" * 100, "nan"]))
        error = "Invalid value for '--batch-size'"
    elif kind == "empty-nic":
        options["--network-interface"] = ""
        error = "--network-interface is empty"
    elif kind == "bad-nic":  # horovodrun's own traceback before: shell metacharacters, a long or a listed name
        options["--network-interface"] = draw(st.one_of(
            st.sampled_from(["eth0;rm -rf x", "$(id)", "eth0 eth1", "a/b", "eth0:1", "eth0,eth1", ".", "..",
                             "e" * 16, "ｅｔｈ０", "eth\n0", "`x`", "eth|0"]),
            st.text(min_size=1, max_size=20).filter(
                lambda t: t.strip() and not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", t) and t not in (".", ".."))
            .filter(lambda t: not t.startswith("-"))))
        error = "Invalid value for '--network-interface': "
    elif kind == "missing-script":  # a Horovod job of a missing script ended in horovodrun's traceback
        command = ["--", sys.executable, draw(st.sampled_from(["no-such-train.py", "sub/none.py"]))]
        error = "Invalid value for COMMAND: the script "
        contains = "does not exist in "
    elif kind == "repeat":
        flag = draw(st.sampled_from(sorted(options) + flags))
        extra = [flag, options[flag]] if flag in options else [flag]
        error, contains = "Option ", f"'{flag}'"
    elif kind == "unknown":
        extra = draw(st.sampled_from([["--worker", "2"], ["--bakend", "horovod"], ["--gracee", "1"]]))
        error = f"No such option '{extra[0]}'"
    elif kind == "missing-command":
        command = ["--", "no-such-binary-tfdist-fuzz", "train.py"]
        error = "Invalid value for COMMAND: 'no-such-binary-tfdist-fuzz' is not an executable"
    elif kind == "foreign":
        foreign = {"parameter_server": ["-np", "4"], "multi_worker_mirrored": ["--ps", "2"],
                   "horovod": ["--workers", "3"], "auto": ["--bind-all"]}[backend]
        extra = foreign
        error = f"{foreign[0]} do(es) not apply to --backend {backend}"
        # the same count under this backend's flag is the fix, not "drop" (it said "drop --workers")
        contains = {"parameter_server": "fix: use --workers 4 in place of -np 4",
                    "horovod": "fix: use -np 3 in place of --workers 3"}.get(backend, "fix: drop ")
    args = _shuffled(draw, [[k, v] for k, v in options.items()] + [[f] for f in flags] + ([extra] if extra else []))
    return Case(("launch", *args, *command), 2 if kind else 0, error, path if not kind else (), contains)


LAUNCH_HOSTILE = [
    Case(("launch", "--workers", "1000000000", *COMMAND), 2, "Invalid value for '--workers'"),
    Case(("launch", "--grace", "nan", *COMMAND), 2, "Invalid value for '--grace'"),
    Case(("launch", "--grace", "inf", *COMMAND), 2, "Invalid value for '--grace'"),
    Case(("launch", "--task-timeout", "nan", *COMMAND), 2, "Invalid value for '--task-timeout'"),
    Case(("launch", "--hosts", "", *COMMAND), 2, "--hosts is empty"),
    Case(("launch", "--hosts", "a:2", "--ps-hosts", "", *COMMAND), 2, "--ps-hosts is empty"),
    Case(("launch", "--hosts", "a:2", "--chief-host", "", *COMMAND), 2, "--chief-host is empty"),
    Case(("launch", "--backend", "auto", "--model", "nocolon", *COMMAND), 2, "Invalid value for '--model'"),
    Case(("launch", "--workers", "2", *COMMAND), 0, path=("tf", "parameter_server", 2, 1, None)),
    Case(("launch", "--backend", "horovod", "--network-interface", "eth0;id", *COMMAND), 2,
         "Invalid value for '--network-interface': 'eth0;id' is not an interface name"),
    Case(("launch", "--backend", "horovod", "--", sys.executable, "no-such-train.py"), 2,
         "Invalid value for COMMAND: the script 'no-such-train.py' does not exist in "),
    Case(("launch", "--backend", "horovod", "--workers", "3", *COMMAND), 2,
         "--workers do(es) not apply to --backend horovod", contains="fix: use -np 3 in place of --workers 3"),
]


class _Started(AssertionError):
    """A process or a probe was started: the fuzzer must never get there."""


def _never(*args, **kwargs):
    raise _Started(f"started something: {args[:2]}")


class _Decided:
    """What ``_choose_backend`` returns, stubbed: horovod on the hosts and workers it was given, and no
    plan (the planning path has its own tests)."""

    def __init__(self, hosts, workers):
        from tfdist.launch.backends import backend_named

        self.backend, self.hosts, self.workers = backend_named("horovod"), hosts, workers

    def plan(self):
        return None


@FUZZ
@given(launch_cases())
@example(LAUNCH_HOSTILE[0]).via("--workers 1e9: 20 s, then EMFILE")
@example(LAUNCH_HOSTILE[1]).via("--grace nan")
@example(LAUNCH_HOSTILE[2]).via("--grace inf")
@example(LAUNCH_HOSTILE[3]).via("--task-timeout nan: 'the job ends in 0 s'")
@example(LAUNCH_HOSTILE[4]).via("--hosts '': ran everything locally")
@example(LAUNCH_HOSTILE[5]).via("--ps-hosts '': 'or add  to --hosts'")
@example(LAUNCH_HOSTILE[6]).via("--chief-host ''")
@example(LAUNCH_HOSTILE[7]).via("--model nocolon: blamed the hosts")
@example(LAUNCH_HOSTILE[8]).via("the defaults reach the parameter-server launcher")
@example(LAUNCH_HOSTILE[9]).via("a shell metacharacter in --network-interface: horovodrun's traceback")
@example(LAUNCH_HOSTILE[10]).via("a Horovod job of a missing script: horovodrun's traceback")
@example(LAUNCH_HOSTILE[11]).via("--backend horovod --workers 3 said 'drop --workers'")
def test_launch_argument_checking(case):
    calls = []

    def tf_cluster(backend, command, workers, ps, evaluator, hosts, *rest, **_):
        calls.append(("tf", backend, workers, ps, hosts))
        return 0

    def horovod(ctx, command, num_proc, hosts, *rest, **_):
        calls.append(("horovod", num_proc, hosts))
        return 0

    def choose(ctx, hosts, workers, ps, *rest):
        calls.append(("auto", hosts, workers if ctx.get_parameter_source("workers").name != "DEFAULT" else None,
                      ps))
        return _Decided(hosts, workers)

    with mock.patch.object(launch_module, "_launch_tf_cluster", tf_cluster), \
            mock.patch.object(launch_module, "_launch_horovod", horovod), \
            mock.patch.object(launch_module, "_choose_backend", choose), \
            mock.patch("tfdist.launch.local.start_group", _never), \
            mock.patch("tfdist.probe.driver.probe_hosts", _never):
        result = _run(case.args)
    _check_common(result, case)
    if case.exit_code == 0:
        assert calls[0] == case.path, (calls, case.path)
        if case.path[0] == "auto":  # then the recorder's answer, horovod on the same hosts
            slots = sum(int(e.rpartition(":")[2]) if ":" in e else 1 for e in case.path[1].split(","))
            assert calls[1:] == [("horovod", slots, case.path[1])], calls
        else:
            assert len(calls) == 1, calls
    else:
        assert not calls, calls  # refused before any launcher
