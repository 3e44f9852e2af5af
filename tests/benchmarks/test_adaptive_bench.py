"""benchmarks/adaptive.py's arithmetic and command lines, without the lab or TensorFlow: when each
scenario changes the lab, the ratios and target verdicts per scenario, and `tfdist launch` command
lines that the CLI accepts."""
from __future__ import annotations


import pytest
from support import REPO, load_script

DRIVER = REPO / "benchmarks" / "adaptive.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(DRIVER, "tfdist_bench_adaptive")


def test_each_scenario_changes_the_lab_at_a_third_and_recovers_at_two_thirds(bench):
    scenarios = {s.key: s for s in bench.SCENARIOS}
    assert bench.changes(scenarios["A"], 12) == []
    assert bench.changes(scenarios["B"], 12) == [(4, "slow")]
    assert bench.changes(scenarios["C"], 12) == [(4, "shape")]
    assert bench.changes(scenarios["D"], 12) == [(4, "slow"), (8, "recover")]
    assert bench.changes(scenarios["D"], 3) == [(1, "slow"), (2, "recover")]


def run(scenario: str, job: str, seconds: float, **extra) -> dict:
    return {"scenario": scenario, "job": job, "seconds": seconds, "ok": True, **extra}


def test_the_ratios_are_against_the_plan_auto_launched_and_the_best_fixed_plan(bench):
    scenarios = [s for s in bench.SCENARIOS if s.key in "AB"]
    records = [run("B", "horovod", 200.0), run("B", "ps", 120.0),
               run("B", "adaptive", 110.0, launched="horovod", switches=1),
               run("A", "horovod", 60.0), run("A", "ps", 100.0),
               run("A", "adaptive", 61.0, launched="horovod", switches=0),
               {**run("B", "adaptive", 500.0, launched="horovod", switches=3), "ok": False}]  # failed: left out
    rows = {row["scenario"]: row for row in bench.summarize(records, scenarios)}
    assert rows["B"]["vs_launch_plan"] == pytest.approx(110 / 200) and rows["B"]["vs_best_fixed"] == pytest.approx(
        110 / 120)
    assert rows["B"]["met"] is True and rows["B"]["switches"] == [1]
    assert rows["A"]["vs_launch_plan"] == pytest.approx(61 / 60) and rows["A"]["met"] is True
    missed = bench.summarize([*records[:2], run("B", "adaptive", 118.0, launched="horovod", switches=1)],
                             scenarios[1:])
    assert missed[0]["met"] is False  # 0.98x the best fixed plan: above 0.95
    failed = bench.summarize([{**run("B", "adaptive", 1.0), "ok": False}], scenarios[1:])
    assert failed[0]["met"] is None and failed[0]["vs_launch_plan"] is None  # nothing to compare, not "missed"
    report = bench.render_report(bench.summarize(records, scenarios), 1)
    assert "vs launch plan" in report and "0.55x" in report and "met" in report


def test_a_runs_time_beyond_its_epochs_is_split_from_the_chiefs_timed_lines(bench):
    log = ("[chief:0@c]  AUTOJOB_STAGE strategy 1008.50\n[chief:0@c]  AUTOJOB_EPOCH 0 1015.00\n"
           "noise AUTOJOB_EPOCH 1 1020.25\n[chief:0@c]  AUTOJOB_STAGE fitted 1051.00\n"
           "[chief:0@c]  AUTOJOB_STAGE written 1052.00\nAUTOJOB_EPOCH 2\n")  # an older job's untimed line
    moments = bench.timeline(log, wall_start=1000.0)
    assert moments == [("strategy", 8.5), ("epoch 0", 15.0), ("epoch 1", 20.2), ("fitted", 51.0), ("written", 52.0)]
    said = bench.beyond_epochs({"timeline": moments, "seconds": 55.0})
    assert said == "; start-up 8.5 s, last epoch to fitted 30.8 s, written to exit 3.0 s"
    assert bench.beyond_epochs({"timeline": moments[:2], "seconds": 55.0}) == ""  # a job that failed early


def test_the_adaptive_run_must_keep_the_launch_plans_accuracy(bench):
    """B and C: the held-out accuracy within 0.5 points of the plan auto launched; a run that was faster
    but learned less misses the target."""
    scenarios = [s for s in bench.SCENARIOS if s.key == "B"]
    fixed = [run("B", "horovod", 200.0, val_accuracy=0.960), run("B", "ps", 120.0, val_accuracy=0.950)]
    close = bench.summarize([*fixed, run("B", "adaptive", 110.0, launched="horovod", switches=1,
                                         val_accuracy=0.957)], scenarios)[0]
    assert close["accuracy_points"] == pytest.approx(0.3) and close["met"] is True
    assert close["accuracy"] == {"horovod": 0.960, "ps": 0.950, "adaptive": 0.957}
    worse = bench.summarize([*fixed, run("B", "adaptive", 110.0, launched="horovod", switches=1,
                                         val_accuracy=0.940)], scenarios)[0]
    assert worse["accuracy_points"] == pytest.approx(2.0) and worse["met"] is False
    assert "96.0/95.0/94.0" in bench.render_report([worse], 1)


@pytest.mark.parametrize("job", ["horovod", "ps", "adaptive"])
def test_every_command_line_is_one_tfdist_launch_takes(bench, job, tmp_path):
    from tfdist.cli.launch import launch

    key = tmp_path / "id"
    key.write_text("")
    argv = bench.launch_argv(job, 150, 12, tmp_path / "out.json", 2222, key)
    assert argv[1:4] == ["-m", "tfdist", "launch"]
    ctx = launch.make_context("launch", argv[4:])
    command = list(ctx.params["command"])
    assert ctx.params["backend"] == {"horovod": "horovod", "ps": "parameter_server", "adaptive": "auto"}[job]
    assert command[command.index("--epochs") + 1] == "11" and "--progress" in command  # 1 warm-up + 11
    assert command[command.index("--data") + 1] == "digits"  # a held-out accuracy for every job
    if job == "adaptive":
        assert ctx.params["model"] is None and "--backend" not in command  # the job is the probe
        assert ctx.params["save_plan"] == str(tmp_path / "out-plan.json")
    else:
        assert command[command.index("--backend") + 1] == {"horovod": "horovod", "ps": "parameter_server"}[job]


def test_jobs_and_a_kept_folder_are_options_and_a_wrong_job_is_refused(bench, capsys):
    args = bench.parse_args(["--scenarios", "b", "--jobs", "adaptive,horovod", "--keep", "/tmp/x"])
    assert [s.key for s in args.scenarios] == ["B"] and args.jobs == ["horovod", "adaptive"]  # the usual order
    assert args.keep == "/tmp/x" and bench.parse_args([]).jobs == list(bench.JOBS)
    with pytest.raises(SystemExit):
        bench.parse_args(["--jobs", "horovod,elastic"])
    assert "--jobs 'horovod,elastic': give jobs from horovod,ps,adaptive" in capsys.readouterr().err
