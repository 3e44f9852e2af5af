"""``tfdist advise`` (tfdist/cli/advise.py): the table, --json, and errors that name the flag and the fix."""
from __future__ import annotations

import dataclasses
import json
import math
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


# --- hostile input: bounded before use, short messages, never non-JSON ---------------------------------------

def _strict_json(text: str):
    def refuse(constant: str):
        raise AssertionError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_a_billion_workers_is_refused_at_once_without_building_anything():
    """It used to build a billion-entry example for the --worker-speeds message: MemoryError, or a hang."""
    args = ["--workers", "1000000000", "--params", "1M", "--batch-size", "32", "--step-ms", "10",
            "--bandwidth", "1gbit", "--worker-speeds", "1,1"]
    done = subprocess.run([sys.executable, "-m", "tfdist", "advise", *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: Invalid value for '--workers': 1000000000 is not in the range 1<=x<=100000 (the advisor "
        "models at most 100,000 workers); fix: give 1 to 100,000")


def test_the_speeds_message_stays_short_at_the_worker_limit():
    """At --workers 100000 the message was 200 KB (an example with one entry per worker)."""
    text = error(run("--workers", "100000", "--ps", "0", "--params", "1M", "--batch-size", "32", "--step-ms",
                     "10", "--bandwidth", "1gbit", "--worker-speeds", "1,1"))
    assert len(text) < 300, len(text)
    assert "2 speed(s) for 100000 worker(s); fix: give one speed per worker, e.g. 1,1,...,0.25 (100,000 values)" \
        in text


@pytest.mark.parametrize("rate", ["1e-300bit", "8bit", "999bit", "0.1kbit"])
def test_rates_below_one_kbit_are_refused(rate):
    """1e-300bit used to exit 0 with "0 bit/s" and "inf ms", and --json wrote Infinity."""
    text = error(run(*LAB[:-1], rate, "--json"))
    assert "'--bandwidth'" in text and "below 1 kbit/s" in text and "; fix: " in text


@pytest.mark.parametrize("flag", ["--step-ms", "--latency-ms", "--overlap", "--ps-overhead-ms",
                                  "--allreduce-overhead-ms", "--ps-epochs-factor"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_no_number_option_takes_nan_or_infinity(flag, value):
    options = dict(zip(LAB[::2], LAB[1::2]))
    options[flag] = value
    text = error(run(*[x for pair in options.items() for x in pair]))
    assert f"'{flag}'" in text and "finite" in text


@pytest.mark.parametrize("args, flag", [
    (["--batch-size", "1000000001"], "--batch-size"), (["--ps", "100001"], "--ps"),
    (["--workers-per-host", "9" * 5000], "--workers-per-host"), (["--dtype-bytes", "9" * 5000], "--dtype-bytes"),
    (["--worker-speeds", "1,1e9"], "--worker-speeds"), (["--step-ms", "1e-4"], "--step-ms"),
])
def test_counts_and_numbers_are_bounded_with_short_messages(args, flag):
    options = dict(zip(LAB[::2], LAB[1::2]))
    options.update(dict(zip(args[::2], args[1::2])))
    text = error(run(*[x for pair in options.items() for x in pair]))
    assert f"'{flag}'" in text and len(text) < 400, text[:500]


def test_the_widest_accepted_input_gives_strict_json_with_finite_numbers():
    result = run("--workers", "100000", "--ps", "0", "--params", "10T", "--dtype-bytes", "16", "--batch-size",
                 "1000000000", "--step-ms", "0.001", "--bandwidth", "1kbit", "--worker-speeds",
                 ",".join(["1000000"] * 99_999 + ["1"]), "--json")
    assert result.exit_code == 0, result.output[-2000:]
    data = _strict_json(result.output)
    figures = [v for s in data["strategies"].values() for v in s.values() if isinstance(v, float)]
    assert figures and all(math.isfinite(v) for v in figures)


def test_a_non_finite_prediction_fails_the_run_instead_of_writing_infinity(monkeypatch):
    import tfdist.advise

    from tfdist.advise.recommend import Advice

    real = tfdist.advise.advise

    def broken(cluster, workload, memory=None):
        advice = real(cluster, workload, memory)
        p = advice.predictions["horovod"]
        return Advice(advice.recommended, advice.variant,
                      {**advice.predictions, "horovod": dataclasses.replace(p, step_ms=float("inf"))},
                      advice.reasons)

    monkeypatch.setattr("tfdist.cli.advise.advise_cluster", broken)
    result = run(*LAB, "--json")
    assert result.exit_code == 1 and "Infinity" not in result.output and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: the prediction strategies.horovod.step_ms is not a finite number, which JSON cannot hold; fix: "
        "report this input as a bug; meanwhile check the inputs' units")


def test_a_cluster_too_large_for_the_ps_model_is_refused_quickly():
    """The parameter-server prediction walks hosts x workers: 3,000 single-worker hosts took minutes."""
    big = ["--workers", "3000", "--params", "1M", "--batch-size", "8", "--step-ms", "10", "--bandwidth", "1gbit"]
    text = error(run(*big, "--ps", "1"))
    assert "'--workers'" in text and "too large for the parameter-server model" in text
    assert run(*big, "--ps", "0").exit_code == 0  # the allreduce predictions alone are cheap
    assert run(*big, "--ps", "1", "--gpus-per-host", "10").exit_code == 0  # 300 hosts x 3,000 workers


def test_save_writes_the_plan_the_advice_recommends(tmp_path):
    from tfdist.plan import load_plan

    path = tmp_path / "plan.json"
    result = invoke("advise", "--workers", "2", "--ps", "1", "--params", "669706", "--batch-size", "64",
                    "--step-ms", "10", "--bandwidth", "50mbit", "--save", str(path), "--json")
    assert result.exit_code == 0, result.output
    plan, _ = load_plan(str(path))
    assert (plan.backend, plan.variant, dict(plan.options)) == ("horovod", "horovod_fp16", {"compression": "fp16"})
    advice = json.loads(result.stdout)
    assert plan.predicted_examples_per_second == pytest.approx(
        advice["strategies"]["horovod_fp16"]["examples_per_second"], rel=1e-6)


def test_save_to_a_folder_that_does_not_exist_is_refused_before_anything(tmp_path):
    result = invoke("advise", "--workers", "2", "--params", "669706", "--batch-size", "64", "--step-ms", "10",
                    "--bandwidth", "50mbit", "--save", str(tmp_path / "no" / "plan.json"))
    assert result.exit_code == 2 and "Invalid value for '--save'" in result.output
    assert "does not exist; fix:" in result.output and "Recommended" not in result.output


# --- memory ---------------------------------------------------------------------------------------------
TABLE = ["--workers", "2", "--ps", "2", "--params", "128M", "--batch-size", "64", "--step-ms", "50",
         "--bandwidth", "10gbit", "--worker-speeds", "1,0.25", "--optimizer", "adagrad"]


def test_memory_json_has_min_ps_and_the_shards():
    data = json.loads(run(*TABLE, "--ps-memory", "1.5GiB", "--json").output)
    assert (data["min_ps"], data["min_ps_shards"]) == (3, 3)
    memory = data["memory"]
    assert (memory["ps"], memory["shards"], memory["ps_fits"], memory["ps_memory"]) == (2, 2, False, 3 * 2**29)
    assert memory["ps_bytes"] > 3 * 2**29 and memory["min_ps_need"]["bytes"] <= 3 * 2**29
    assert data["recommended"] != "parameter_server"
    assert data["reasons"][-1].startswith("parameter_server does not fit: with 2 ps and shards=2 the fullest")


def test_a_ps_that_fits_is_recommended_and_the_text_says_the_fewest_ps():
    slow = ["--step-ms", "500", "--bandwidth", "10gbit", "--worker-speeds", "1,0.05"]  # a far slower worker
    result = run(*TABLE[:-8], *slow, "--optimizer", "adagrad", "--ps-memory", "3GiB")
    assert result.exit_code == 0, result.output
    assert "Recommended: parameter_server" in result.output
    assert "Each of 2 ps (shards=2): 1.66 GiB (variables 244 MiB + slots 244 MiB + working space 977 MiB +\n" \
           "  server 238 MiB) of --ps-memory 3 GiB: fits." in result.output
    assert "Fewest ps that fit --ps-memory 3 GiB: 2 with shards=2 (1.66 GiB each)." in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 100


def test_a_model_that_fits_nowhere_is_refused_with_the_numbers():
    text = error(run(*TABLE, "--ps-memory", "1.5GiB", "--worker-memory", "1.5GiB"))
    assert text.startswith("Error: Invalid value for '--ps-memory': no backend fits in the memory given: ")
    assert "horovod, multi_worker_mirrored: every worker holds the whole model: 3.57 GiB" in text
    assert "parameter_server: with 2 ps and shards=2 the fullest ps needs 1.66 GiB" in text
    assert "above --ps-memory 1.5 GiB; --ps 3 with shards=3 is the fewest that fit" in text
    assert run(*TABLE[:3], "3", *TABLE[4:], "--ps-memory", "1.5GiB", "--worker-memory", "1.5GiB").exit_code == 0


def test_the_plan_saved_under_a_memory_cap_carries_its_shards(tmp_path):
    from tfdist.plan import load_plan

    path = tmp_path / "plan.json"
    result = run(*TABLE[:3], "3", *TABLE[4:], "--ps-memory", "1.5GiB", "--worker-memory", "1.5GiB",
                 "--save", str(path))
    assert result.exit_code == 0, result.output
    plan, _ = load_plan(str(path))
    assert (plan.backend, plan.ps, dict(plan.options)) == ("parameter_server", 3, {"shards": 3})
    assert (plan.inputs["optimizer"], plan.inputs["ps_memory"], plan.inputs["min_ps"]) == ("adagrad", 3 * 2**29, 3)


@pytest.mark.parametrize("args, flag, words", [
    (["--ps-memory", "lots"], "--ps-memory", ["'lots' is not a size", "4GiB, 512M"]),
    (["--ps-memory", "0"], "--ps-memory", ["below 1 byte"]),
    (["--worker-memory", "-4G"], "--worker-memory", ["is not a size"]),
    (["--optimizer", "adamm"], "--optimizer", ["not an optimizer the advisor knows", "adagrad 1"]),
    (["--largest-variable", "0"], "--largest-variable", ["below 1"]),
    (["--largest-variable", "200M"], "--largest-variable", ["larger than the model", "at most --params"]),
])
def test_bad_memory_input_names_the_option(args, flag, words):
    given = dict(zip(TABLE[::2], TABLE[1::2]))
    given.update(dict(zip(args[::2], args[1::2])))
    text = error(run(*[x for pair in given.items() for x in pair]))
    assert f"'{flag}'" in text, text
    for word in words:
        assert word in text


def test_memory_caps_need_the_optimizer_and_probe_reads_them():
    text = error(run(*LAB, "--ps-memory", "4GiB"))
    assert text.startswith("Error: --ps-memory needs --optimizer") and "fix: add e.g. --optimizer adam" in text
    assert "--largest-variable needs --optimizer" in error(run(*LAB, "--largest-variable", "1000"))
    text = error(run("--probe", "--hosts", "a:1,b:1", "--batch-size", "8", "--params", "1M", "--step-ms", "5",
                     "--optimizer", "adam", "--ps-memory", "4GiB"))
    assert "--probe measures --ps-memory itself" in text


def test_the_optimizer_alone_shows_what_each_task_needs():
    result = run(*LAB, "--optimizer", "adam")
    assert result.exit_code == 0, result.output
    assert "Memory: 2.55 MiB of variables (taken as one variable: give --largest-variable, or --probe" in result.output
    assert json.loads(run(*LAB, "--optimizer", "adam", "--json").output)["min_ps"] is None
    assert "min_ps" not in json.loads(run(*LAB, "--json").output)  # no memory described, none reported


# --- a host holds all its tasks ---------------------------------------------------------------------------
BIG = ["--workers", "16", "--gpus-per-host", "8", "--params", "1B", "--batch-size", "64", "--step-ms", "100",
       "--bandwidth", "25gbit", "--optimizer", "adam"]


def test_a_worker_host_holds_all_its_workers():
    """--worker-memory is a host's: 8 workers of a 1B-parameter Adam model (about 40 GB each) need about
    320 GB of a 64 GiB host, so allreduce does not fit; with 8 hosts of one worker each it does."""
    text = error(run(*BIG, "--ps", "0", "--worker-memory", "64GiB"))
    assert text.startswith("Error: Invalid value for '--worker-memory': no backend fits in the memory given: ")
    assert "every worker holds the whole model: 37.5 GiB" in text
    assert "8 workers on one host need 300 GiB, above --worker-memory 64 GiB" in text
    one = json.loads(run(*BIG[:1], "8", *BIG[4:], "--ps", "0", "--worker-memory", "64GiB", "--json").output)
    assert one["recommended"] == "horovod" and one["memory"]["worker_fits"]["allreduce"] is True
    assert one["memory"]["host_bytes"]["allreduce"] == one["memory"]["worker_bytes"]["allreduce"]


def test_a_colocated_ps_is_added_to_its_worker_hosts_need():
    """Under --ps-placement colocated the ps shares a worker host: what it has is the host's memory less
    its workers' runtime; the same ps on a host of its own fits in that memory."""
    small = ["--workers", "2", "--gpus-per-host", "2", "--params", "128M", "--batch-size", "64", "--step-ms",
             "50", "--bandwidth", "10gbit", "--optimizer", "adagrad", "--ps", "1"]
    alone = json.loads(run(*small, "--ps-memory", "3.2GiB", "--json").output)["memory"]
    assert alone["ps_fits"] is True and alone["ps_room"] == int(3.2 * 2**30)  # 3.09 GiB on a host of its own
    text = error(run(*small, "--ps-placement", "colocated", "--worker-memory", "3.2GiB"))
    assert text.startswith("Error: Invalid value for '--worker-memory': no backend fits in the memory given: ")
    assert "2 workers on one host need 7.14 GiB, above --worker-memory 3.2 GiB" in text
    assert ("the fullest ps needs 3.09 GiB, above 2.73 GiB per ps (--worker-memory 3.2 GiB less the runtime of "
            "its 2 workers); --ps 2 with shards=2 is the fewest that fit") in text
    roomy = json.loads(run(*small, "--ps-placement", "colocated", "--worker-memory", "8GiB", "--json").output)
    memory = roomy["memory"]
    assert memory["ps_fits"] is True and memory["ps_room"] == 8 * 2**30 - 2 * memory["server_bytes"]
    assert memory["host_bytes"]["parameter_server"] == memory["ps_bytes"] + 2 * memory["server_bytes"]
    assert memory["host_bytes"]["allreduce"] == 2 * memory["worker_bytes"]["allreduce"]
    text = error(run(*small, "--ps-placement", "colocated", "--worker-memory", "8GiB", "--ps-memory", "4GiB"))
    assert "'--ps-memory'" in text and "under --ps-placement colocated" in text and "; fix: " in text
