"""``tfdist advise`` (tfdist/cli/advise.py): the table, --json, and errors that name the flag and the fix."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import invoke, usage_error

LAB = ["--workers", "2", "--ps", "1", "--params", "669706", "--batch-size", "64", "--step-ms", "10",
       "--bandwidth", "1gbit"]


def run(*args: str):
    return invoke("advise", *args)


error = usage_error


def test_json_has_the_promised_keys():
    result = run(*LAB, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["recommended"] == "horovod"
    assert {"horovod", "parameter_server", "multi_worker_mirrored"} <= set(data["strategies"])
    for figures in data["strategies"].values():
        assert figures["step_ms"] > 0 and figures["examples_per_second"] > 0
        assert 0 < figures["scaling_efficiency"] <= 1
    assert data["reasons"] and all(isinstance(r, str) for r in data["reasons"])


def test_uneven_workers_flip_the_json_answer():
    result = run(*LAB[:-1], "10gbit", "--worker-speeds", "1,0.25", "--json")
    assert json.loads(result.output)["recommended"] == "parameter_server"


def test_the_table_fits_in_100_columns_and_names_the_recommendation():
    result = run(*LAB, "--worker-speeds", "1,0.25", "--gpus-per-host", "1", "--latency-ms", "0.2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert any(line.startswith("strategy") and "examples/s" in line and "efficiency" in line
               for line in lines)
    assert any(line.startswith("parameter_server ") for line in lines)
    assert any(line.startswith("Recommended: horovod") for line in lines)
    assert "- if the job must survive losing a worker" in result.output


def test_hierarchical_row_appears_with_several_gpus_per_host():
    result = run("--workers", "16", "--gpus-per-host", "4", "--ps", "0", "--params", "25M",
                 "--batch-size", "32", "--step-ms", "100", "--bandwidth", "10gbit", "--json")
    data = json.loads(result.output)
    assert "horovod_hierarchical" in data["strategies"] and "parameter_server" not in data["strategies"]


@pytest.mark.parametrize("args, flag, words", [
    (["--bandwidth", "50"], "--bandwidth", ["has no unit", "50mbit"]),
    (["--bandwidth", "fast"], "--bandwidth", ["is not a rate", "1gbit"]),
    (["--bandwidth", "1gbit,1gbit,1gbit"], "--bandwidth", ["3 rates for 2 worker host(s)", "fix:"]),
    (["--worker-speeds", "1,1,0.25"], "--worker-speeds",
     ["3 speed(s) for 2 worker(s)", "fix: give one speed"]),
    (["--worker-speeds", "1,x"], "--worker-speeds", ["'x' is not a number"]),
    (["--worker-speeds", "1,0"], "--worker-speeds", ["not a positive speed"]),
    (["--worker-speeds", "1,nan"], "--worker-speeds", ["not a positive speed"]),
    (["--params", "0"], "--params", ["below 1"]),
    (["--params", "lots"], "--params", ["is not a count"]),
    (["--step-ms", "0"], "--step-ms", []),
    (["--step-ms", "nan"], "--step-ms", ["positive finite"]),
    (["--workers", "0"], "--workers", []),
    (["--overlap", "2"], "--overlap", []),
    (["--ps-bandwidth", "9"], "--ps-bandwidth", ["has no unit"]),
    (["--latency-ms", "nan"], "--latency-ms", ["from 0 to 10"]),
])
def test_bad_input_names_the_flag(args, flag, words):
    options = dict(zip(LAB[::2], LAB[1::2]))
    options.update(dict(zip(args[::2], args[1::2])))
    text = error(run(*[x for pair in options.items() for x in pair]))
    assert f"'{flag}'" in text
    for word in words:
        assert word in text


def test_the_message_names_the_flag_once_then_the_value():
    text = error(run(*LAB[:-1], "50"))
    assert text.startswith("Error: Invalid value for '--bandwidth': '50' has no unit; fix: add one: 50mbit")
    text = error(run(*LAB[:-1], "1gbit,10GBPS"))
    assert "'--bandwidth': '10GBPS': 'BPS' does not say bits or bytes; fix: write 10gbit" in text


def test_required_options_and_repeats():
    assert "Missing option '--bandwidth'" in error(run(*LAB[:-2]))
    assert "was given 2 times" in error(run(*LAB, "--bandwidth", "50mbit"))


def test_probe_refuses_what_it_measures():  # the probe itself: tests/advise/test_probe.py
    text = error(run(*LAB, "--probe"))
    assert "--bandwidth and --probe contradict each other" in text and "fix: drop --bandwidth" in text


def test_advise_imports_no_tensorflow():
    code = ("import sys; from click.testing import CliRunner; from tfdist.cli.main import cli; "
            f"r = CliRunner().invoke(cli, ['advise', *{LAB!r}, '--json']); "
            "assert r.exit_code == 0, r.output; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_measured_ps_epochs_factor_turns_the_answer_in_the_table():
    uneven = [*LAB[:-1], "10gbit", "--worker-speeds", "1,0.25"]
    assert "Recommended: parameter_server" in run(*uneven).output
    result = run(*uneven, "--ps-epochs-factor", "3")
    assert result.exit_code == 0, result.output
    assert "Recommended: horovod" in result.output
    assert "reaches the target accuracy sooner although parameter_server is faster per" in result.output
    assert "--ps-epochs-factor" in error(run(*uneven, "--ps-epochs-factor", "0"))
