"""`tfdist launch --backend auto` (tfdist/cli/launch.py): its option errors, and which backend it launches
on which hosts, with the probe and the launchers replaced (no ssh, no TensorFlow)."""
from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
from support import invoke, usage_error

import tfdist.advise
from tfdist.probe import driver as probe
from tfdist.probe.driver import LinkMeasure, aggregate
from tfdist.cli import launch as launch_module
from tfdist.launch.hosts import parse_hosts

AUTO = ["--backend", "auto", "--hosts", "w1:1,w2:1,p:1", "--model", "m:f", "--batch-size", "64"]
COMMAND = ["--", sys.executable, "train.py"]


def run(*args: str):
    return invoke("launch", *args)


error = usage_error


def test_auto_without_hosts_says_why_and_the_fix(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)  # outside an allocation
    text = error(run("--backend", "auto", "--model", "m:f", "--batch-size", "64", *COMMAND))
    assert "--backend auto needs --hosts" in text and "compares the link rates" in text
    assert "fix:" in text and "--backend parameter_server" in text


def test_auto_with_a_model_needs_its_batch_size():
    """--model is timed at --batch-size. Without --model, --backend auto is no longer refused: the plan
    starts from a first guess that the run re-fits (issue 36; tests/cli/test_launch.py)."""
    args = list(AUTO)
    at = args.index("--batch-size")
    del args[at:at + 2]
    text = error(run(*args, *COMMAND))
    assert "--model needs --batch-size; fix: add e.g. --batch-size 64" in text


@pytest.mark.parametrize("extra, flag", [(["--model", "m:f"], "--model"),
                                         (["--batch-size", "8"], "--batch-size"),
                                         (["--probe-seconds", "2"], "--probe-seconds")])
@pytest.mark.parametrize("backend", ["parameter_server", "multi_worker_mirrored", "horovod"])
def test_auto_options_are_refused_on_other_backends(backend, extra, flag):
    text = error(run("--backend", backend, *extra, *COMMAND))
    assert f"{flag} do(es) not apply to --backend {backend}" in text


@pytest.mark.parametrize("extra, flag", [(["-np", "2"], "-np"), (["--evaluator"], "--evaluator"),
                                         (["--chief-host", "w1"], "--chief-host"),
                                         (["--bind-all"], "--bind-all"),
                                         (["--elastic"], "--elastic")])
def test_options_auto_cannot_honour_are_refused(extra, flag):
    assert f"{flag} do(es) not apply to --backend auto" in error(run(*AUTO, *extra, *COMMAND))


def _links(slow_mbit: float = 2000) -> list[LinkMeasure]:
    return [LinkMeasure(a, b, (slow_mbit if "w2" in (a, b) else 2000) * 1e6, 1e-4)
            for a, b in probe.ring(["w1", "w2", "p"])]


class _Calls(list):
    environments: list


@pytest.fixture
def launched(monkeypatch, tmp_path):
    """Replace the launchers: record what auto would start (in a temporary folder: auto saves its plan
    under the working directory)."""
    monkeypatch.chdir(tmp_path)
    calls = _Calls()

    def tf_cluster(backend, command, workers, ps, evaluator, hosts, *rest, **_):
        calls.append((backend, hosts, workers, ps))
        environments.append(rest[-1])
        return 0

    def horovod(ctx, command, num_proc, hosts, *rest, **_):
        calls.append(("horovod", hosts, None, None))
        environments.append(rest[-1])
        return 0

    environments: list[dict] = []
    calls.environments = environments  # the environment each launcher was given

    monkeypatch.setattr(launch_module, "_launch_tf_cluster", tf_cluster)
    monkeypatch.setattr(launch_module, "_launch_horovod", horovod)
    return calls


def _fake_probe(monkeypatch, steps, slow_mbit=2000, seen=None, links=None):
    def fake(hosts, workers, ps, model=None, batch_size=None, **kwargs):
        if seen is not None:
            seen.append((hosts, workers, ps, model, batch_size, kwargs["seconds"]))
        return aggregate(parse_hosts(hosts), links or _links(slow_mbit), steps=steps, params=1_348_618,
                         dtype_bytes=4, batch_size=batch_size)

    monkeypatch.setattr(probe, "probe_hosts", fake)


def test_an_uneven_cluster_launches_the_ps_cluster_on_every_host(monkeypatch, launched):
    seen = []
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 100.0}, seen=seen)
    result = run(*AUTO, "--ps", "1", *COMMAND)
    assert result.exit_code == 0, result.output
    # workers by default: the slots left after the ps
    assert seen == [("w1:1,w2:1,p:1", 2, 1, "m:f", 64, launch_module.AUTO_PROBE_SECONDS)]
    assert launched == [("parameter_server", "w1:1,w2:1,p:1", 2, 1)]
    assert "Measured:" in result.output and "Recommended: parameter_server" in result.output
    assert "launching parameter_server" in result.output


def test_horovod_runs_on_the_worker_hosts_only(monkeypatch, launched):
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0})
    result = run(*AUTO, "--probe-seconds", "2", *COMMAND)
    assert result.exit_code == 0, result.output
    assert "Recommended: horovod" in result.output
    assert launched == [("horovod", "w1:1,w2:1", None, None)]  # not p: it was placed no worker


def test_multi_worker_mirrored_runs_on_the_worker_hosts_only(monkeypatch, launched):
    from tfdist.advise.recommend import Advice

    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0})
    real = tfdist.advise.advise

    def mirrored(cluster, workload, memory=None, unavailable=None):
        advice = real(cluster, workload, memory, unavailable)
        return Advice("multi_worker_mirrored", "multi_worker_mirrored", advice.predictions, ("made up",))

    monkeypatch.setattr(tfdist.advise, "advise", mirrored)
    result = run("--backend", "auto", "--hosts", "w1:2,w2:1,p:1", "--workers", "3", "--model", "m:f",
                 "--batch-size", "64", *COMMAND)
    assert result.exit_code == 0, result.output
    assert launched == [("multi_worker_mirrored", "w1:2,w2:1", 3, 1)]


def test_a_worker_host_without_horovod_gets_the_best_backend_that_can_launch(monkeypatch, launched):
    """Even workers on fast links: horovod is predicted fastest, but w2's probe agent found no Horovod
    TensorFlow extension. auto used to launch horovodrun there; now it launches what can run, and says why."""
    links = [dataclasses.replace(link, target_horovod=link.target != "w2") for link in _links()]
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0}, links=links)
    result = run(*AUTO, *COMMAND)
    assert result.exit_code == 0, result.output
    assert "Recommended: multi_worker_mirrored" in result.output
    assert "horovod would be faster but cannot launch here: Horovod with its TensorFlow ops is not installed " \
           "on w2; fix: build Horovod with TensorFlow and Gloo" in " ".join(result.output.split())
    assert launched == [("multi_worker_mirrored", "w1:1,w2:1", 2, 1)]


def test_a_ps_host_without_horovod_does_not_keep_horovod_off_the_workers(monkeypatch, launched):
    """Only the hosts that get a worker run Horovod's ranks: p, the ps host, need not have it."""
    links = [dataclasses.replace(link, target_horovod=link.target != "p") for link in _links()]
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0}, links=links)
    result = run(*AUTO, *COMMAND)
    assert result.exit_code == 0, result.output
    assert "Recommended: horovod" in result.output and "cannot launch" not in result.output
    assert launched == [("horovod", "w1:1,w2:1", None, None)]


def test_without_horovodrun_here_auto_plans_without_horovod(monkeypatch, launched):
    import tfdist.auto.pipeline

    monkeypatch.setattr(tfdist.auto.pipeline, "horovod_launcher", lambda: None)
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0})
    result = run(*AUTO, "--ps", "1", *COMMAND)
    assert result.exit_code == 0, result.output
    assert "horovodrun is neither beside this Python nor on PATH" in " ".join(result.output.split())
    assert "Recommended: multi_worker_mirrored" in result.output  # horovod is predicted fastest here
    assert launched == [("multi_worker_mirrored", "w1:1,w2:1", 2, 1)]


def test_a_probe_failure_is_a_usage_error_and_nothing_is_launched(monkeypatch, launched):
    def failing(*args, **kwargs):
        raise probe.ProbeError("cannot probe the hosts: ssh to p failed; fix: make `ssh p true` work")

    monkeypatch.setattr(probe, "probe_hosts", failing)
    text = error(run(*AUTO, *COMMAND))
    assert "ssh to p failed" in text and launched == []


def test_too_many_workers_for_the_slots_is_a_usage_error(launched):
    assert "the job needs 4 slots" in error(run(*AUTO, "--workers", "3", *COMMAND))


def _plan_of(environ: dict):
    from tfdist.plan import PLAN_ENV, load_plan

    return load_plan(environ[PLAN_ENV])[0]


def test_slow_links_launch_horovod_with_the_planned_fp16_in_every_tasks_environment(monkeypatch, launched,
                                                                                    tmp_path):
    from tfdist.plan import PLAN_RESULT_ENV

    slow = [LinkMeasure(a, b, 50e6, 1e-4) for a, b in probe.ring(["w1", "w2", "p"])]
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0}, links=slow)
    path = tmp_path / "plan.json"
    result = run(*AUTO, "--save-plan", str(path), *COMMAND)
    assert result.exit_code == 0, result.output
    assert launched == [("horovod", "w1:1,w2:1", None, None)]
    plan = _plan_of(launched.environments[0])
    assert (plan.variant, dict(plan.options), plan.workers) == ("horovod_fp16", {"compression": "fp16"}, 2)
    assert _plan_of({"TFDIST_PLAN": str(path)}) == plan  # the saved file is the plan the tasks got
    assert launched.environments[0][PLAN_RESULT_ENV] == str(tmp_path / "plan.measured.json")
    assert "plan: horovod (horovod_fp16), compression='fp16'; 2 worker(s); predicted " in result.output
    assert result.output.rstrip().splitlines()[-1].startswith("tfdist launch: no measured figures came back")


def test_the_end_of_the_run_refits_the_model_on_the_jobs_own_epochs(monkeypatch, launched, tmp_path):
    """The chief's record carries each epoch's per-rank figures (PlanCheck); the launcher's last line
    predicts every plan again on them: here w2 became a straggler after the probe."""
    import json

    from tfdist.plan import PLAN_RESULT_ENV

    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0})  # even at launch: Horovod

    def horovod_with_a_straggler(ctx, command, num_proc, hosts, *rest, **_):
        launched.append(("horovod", hosts, None, None))
        epoch = {"workers": [{"compute_ms": 100.0, "communication_ms": 301.0, "examples_per_second": 160.0},
                             {"compute_ms": 400.0, "communication_ms": 1.0, "examples_per_second": 160.0}]}
        Path(rest[-1][PLAN_RESULT_ENV]).write_text(json.dumps({
            "measured_examples_per_second": 320.0, "measured_step_ms": 401.0,
            "worker_epochs": [{"epoch": 0, **epoch}, {"epoch": 1, **epoch}]}))
        return 0

    monkeypatch.setattr(launch_module, "_launch_horovod", horovod_with_a_straggler)
    result = run(*AUTO, "--save-plan", str(tmp_path / "plan.json"), *COMMAND)
    assert result.exit_code == 0, result.output
    assert launched == [("horovod", "w1:1,w2:1", None, None)]
    last = result.output.rstrip().splitlines()
    assert last[-2].startswith("tfdist launch: measured 320 examples/s, predicted "), last[-2]
    assert last[-1].startswith("tfdist launch: re-fitted on the job's own epochs (worker speeds 1, 0.25): "
                               "parameter_server "), last[-1]
    assert "(ran)" in last[-1] and "parameter_server would have been " in last[-1], last[-1]


def test_a_compute_bound_ring_plans_no_compression(monkeypatch, launched, tmp_path):
    _fake_probe(monkeypatch, {"w1": 100.0, "w2": 100.0})  # 100 ms of compute, 22 ms of ring at 2 Gbit/s
    result = run(*AUTO, "--save-plan", str(tmp_path / "plan.json"), *COMMAND)
    assert result.exit_code == 0, result.output
    plan = _plan_of(launched.environments[0])
    assert (plan.variant, dict(plan.options)) == ("horovod", {})


def test_a_ps_plan_reaches_the_ps_cluster(monkeypatch, launched, tmp_path):
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 100.0})
    result = run(*AUTO, "--save-plan", str(tmp_path / "plan.json"), *COMMAND)
    assert result.exit_code == 0, result.output
    plan = _plan_of(launched.environments[0])
    assert (plan.backend, plan.workers, plan.ps) == ("parameter_server", 2, 1)


def test_an_unwritable_plan_path_stops_before_the_probe(monkeypatch, launched, tmp_path):
    seen = []
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0}, seen=seen)
    text = error(run(*AUTO, "--save-plan", str(tmp_path / "missing" / "plan.json"), *COMMAND))
    assert "Invalid value for '--save-plan'" in text and "does not exist; fix:" in text
    assert seen == [] and launched == []


@pytest.mark.parametrize("make", ["file", "folder"])
def test_a_default_plans_folder_that_cannot_take_the_plan_stops_before_the_probe(monkeypatch, launched, tmp_path,
                                                                              make):
    """Without --save-plan the plan goes to ./tfdist-plans/; a file of that name used to end the launch
    with a FileExistsError traceback after the whole probe (a folder that takes no file: /proc here)."""
    seen = []
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0}, seen=seen)
    if make == "file":
        (tmp_path / "tfdist-plans").write_text("not a folder")
        words = "'tfdist-plans' exists and is not a folder"
    else:
        monkeypatch.chdir("/proc")
        words = "'/proc' takes no new file"
    text = error(run(*AUTO, *COMMAND))
    assert "--backend auto saves its plan in ./tfdist-plans/ unless --save-plan says where" in text, text
    assert words in text and "; fix: pass --save-plan PATH in a writable folder, or launch from one" in text, text
    assert seen == [] and launched == []


def test_a_plan_name_that_leaves_no_room_for_the_measured_file_stops_before_the_probe(monkeypatch, launched,
                                                                                     tmp_path):
    """The chief writes <plan>.measured.json beside the plan at the end of fit: a plan name of 250 to
    255 characters passed the early check, and that file's name (9 more) could not be written."""
    seen = []
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0}, seen=seen)
    name = "p" * 250 + ".json"  # 255 characters: NAME_MAX on Linux
    text = error(run(*AUTO, "--save-plan", str(tmp_path / name), *COMMAND))
    assert "Invalid value for '--save-plan'" in text and "the chief writes the measured figures beside it" in text
    assert re.search(r"\.measured\.json'( \(\d+ characters\))? cannot be written \(File name too long\): its name "
                     r"is 264 bytes", text) and "; fix: " in text, text
    assert seen == [] and launched == [] and list(tmp_path.iterdir()) == []


def test_save_plan_belongs_to_auto():
    assert "--save-plan do(es) not apply to --backend horovod" in error(
        run("--backend", "horovod", "--save-plan", "p.json", *COMMAND))


def _allocation(monkeypatch, nodelist: str, tasks_per_node: str | None = None) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", nodelist)
    if tasks_per_node is None:
        monkeypatch.delenv("SLURM_TASKS_PER_NODE", raising=False)
    else:
        monkeypatch.setenv("SLURM_TASKS_PER_NODE", tasks_per_node)


def test_inside_a_slurm_allocation_its_nodes_stand_in_for_hosts(monkeypatch, launched):
    seen = []
    _allocation(monkeypatch, "w[1-2],p", "1(x3)")
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 100.0}, seen=seen)
    result = run("--backend", "auto", "--model", "m:f", "--batch-size", "64", "--ps", "1", *COMMAND)
    assert result.exit_code == 0, result.output
    assert "--hosts from the SLURM allocation (SLURM_JOB_NODELIST): w1:1,w2:1,p:1" in result.output
    assert seen[0][:3] == ("w1:1,w2:1,p:1", 2, 1)
    assert launched == [("parameter_server", "w1:1,w2:1,p:1", 2, 1)]


def test_given_hosts_win_over_the_allocation(monkeypatch, launched):
    seen = []
    _allocation(monkeypatch, "node[1-9]")
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 100.0}, seen=seen)
    result = run(*AUTO, "--ps", "1", *COMMAND)
    assert result.exit_code == 0, result.output
    assert seen[0][0] == "w1:1,w2:1,p:1" and "SLURM allocation" not in result.output


@pytest.mark.parametrize("nodelist, tasks, words", [
    ("node[1-", None, "SLURM_JOB_NODELIST"),
    ("node[1-3]", "2(x2)", "SLURM_TASKS_PER_NODE"),
    ("node[1-2]", "1,0", "SLURM_TASKS_PER_NODE"),
])
def test_a_garbled_allocation_is_named_with_the_fix(monkeypatch, launched, nodelist, tasks, words):
    _allocation(monkeypatch, nodelist, tasks)
    text = error(run("--backend", "auto", "--model", "m:f", "--batch-size", "64", *COMMAND))
    assert "--hosts was not given and the SLURM allocation cannot stand in" in text
    assert words in text and "fix:" in text and launched == []


def test_advise_probe_takes_the_allocations_nodes(monkeypatch):
    seen = []
    _allocation(monkeypatch, "w[1-2],p")
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0}, seen=seen)
    result = invoke("advise", "--probe", "--ps", "1", "--model", "m:f", "--batch-size", "64")
    assert result.exit_code == 0, result.output
    assert "--hosts from the SLURM allocation (SLURM_JOB_NODELIST): w1:1,w2:1,p:1" in result.output
    assert seen[0][:3] == ("w1:1,w2:1,p:1", 2, 1)


def test_advise_probe_outside_an_allocation_still_needs_hosts(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    text = error(invoke("advise", "--probe", "--ps", "1", "--model", "m:f", "--batch-size", "64"))
    assert "--probe needs --hosts" in text and "SLURM allocation" in text


@pytest.mark.parametrize("name, words", [
    ("/proc/plan.json", "cannot be written"),
    ("/sys/plan.json", "cannot be written"),
    ("{tmp}/" + "p" * 300 + ".json", "cannot be written (File name too long)"),
    ("{tmp}/sub/", "names a folder, not a file"),
])
def test_a_plan_path_the_file_system_refuses_stops_before_the_probe(monkeypatch, launched, tmp_path, name, words):
    """Issue 34: these passed the early check and failed after 8-12 s of probing."""
    seen = []
    _fake_probe(monkeypatch, {"w1": 10.0, "w2": 10.0}, seen=seen)
    (tmp_path / "sub").mkdir()
    text = error(run(*AUTO, "--save-plan", name.format(tmp=tmp_path), *COMMAND))
    assert "Invalid value for '--save-plan'" in text and words in text and "; fix: " in text, text
    assert seen == [] and launched == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]  # the check leaves nothing behind

