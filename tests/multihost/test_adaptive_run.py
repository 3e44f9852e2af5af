"""An adaptive run on the network lab: `tfdist launch --backend auto` starts Horovod on two even workers,
w2 is throttled mid-run, and the job switches to parameter servers at an epoch boundary.

c is the launcher's host; `--hosts w1:1,w2:1,p:1 --workers 2 --ps 1`, and no `--model`: the links are
probed, the first plan starts from a guess, and the job's own epochs re-fit it. The job is the
benchmarks' MLP (`benchmarks/auto_job.py`, unchanged: `make_strategy("auto")` and `strategy.fit`). Once the chief has
reported its second epoch, w2 drops to a tenth of a core. What is asserted comes from the tasks
themselves: the chief's epoch reports in the run folder (each epoch once, the variant that trained it),
the Horovod ranks' and the parameter-server chief's own log lines, and the final chief's strategy
object (auto_job's record). Bounds on rates are left out: a loaded machine moves them.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import pytest
from support import REPO, assert_nothing_left, subprocess_env

from tfdist.testing.netlab import Lab

HOSTS = "w1:1,w2:1,p:1"
EPOCHS = 10  # 1 warm-up + 9: after the straggler's two slow epochs, 6 remain to win back a restart
TIMEOUT = 600.0


@pytest.fixture
def lab(make_lab) -> Lab:
    return make_lab(["c", "w1", "w2", "p"])


def test_a_straggler_made_mid_run_switches_horovod_to_parameter_servers(lab, tmp_path):
    plan_path = tmp_path / "plan.json"
    out = tmp_path / "result.json"
    argv = [sys.executable, "-m", "tfdist", "launch", "--backend", "auto", "--hosts", HOSTS, "--workers", "2",
            "--ps", "1", "--probe-seconds", "0.5",
            "--ssh-port", str(lab.ssh_port), "--ssh-identity-file", str(lab.identity_file), "--grace", "2",
            "--save-plan", str(plan_path), "--",
            sys.executable, "benchmarks/auto_job.py", "--steps", "100", "--warmup-epochs", "1",
            "--epochs", str(EPOCHS - 1), "--out", str(out), "--logdir", str(tmp_path / "runs")]
    env = subprocess_env()
    process = lab.popen("c", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                        cwd=REPO)
    lines: list[str] = []
    throttled = threading.Event()

    def read() -> None:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if not throttled.is_set() and line.startswith(f"tfdist launch: epoch 2/{EPOCHS} on horovod"):
                lab.limit_cpu("w2", 0.1)  # from the third epoch on, w2 is a straggler
                throttled.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = process.wait(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
        reader.join(timeout=30)
    output = "\n".join(lines)
    print("\n" + "\n".join(line for line in lines if line.startswith("tfdist launch")))
    assert code == 0, output[-5000:]
    assert "model: not measured (no --model); a first guess of" in output, output[-5000:]
    assert "tfdist launch --backend auto: launching horovod (horovod) on w1:1,w2:1" in output, output[-5000:]
    applied = [line for line in lines if "tfdist plan: applying TFDIST_PLAN (inline JSON): horovod, no options" in line]
    assert len(applied) == 2, output[-5000:]  # the even start: the plain ring, applied by both ranks
    assert throttled.is_set(), output[-5000:]
    switches = [line for line in lines if line.startswith("tfdist launch: re-planned at epoch ")]
    assert len(switches) == 1, output[-5000:]
    found = re.match(r"tfdist launch: re-planned at epoch (\d+): (\S+) -> parameter_server \(measured [\d,]+ "
                     r"examples/s, predicted [\d,]+ for parameter_server; switching took ([\d.]+) s: ([\d.]+) s until the old job "
                     r"ended, ([\d.]+) s until the new one had started and restored\)$", switches[0])
    assert found and found.group(2).startswith("horovod"), switches[0]
    took, stopping, starting = (float(found.group(g)) for g in (3, 4, 5))
    assert 0 < stopping <= took and starting > 0, switches[0]  # the old job's end and the new one's start
    at = int(found.group(1))
    assert 3 <= at < EPOCHS, switches[0]

    # every epoch reported once, by the variant that trained it
    folder = tmp_path / "plan.run"
    reports = {int(path.stem.split("-")[1]): json.loads(path.read_text()) for path in folder.glob("epoch-*.json")}
    assert sorted(reports) == list(range(EPOCHS)), sorted(reports)
    assert all(reports[e]["variant"].startswith("horovod") for e in range(at)), reports
    assert all(reports[e]["variant"] == "parameter_server" for e in range(at, EPOCHS)), reports
    # the chief shares w1 with worker 0: that worker's host is also timed at rest, w2's worker is not
    ps_workers = [reports[e]["workers"] for e in range(at, EPOCHS) if reports[e]["workers"]]
    assert ps_workers and all("rest_compute_ms" in workers[0] and "rest_compute_ms" not in workers[1]
                              for workers in ps_workers), ps_workers
    assert not (folder / "state").exists()  # the switch's checkpoint is removed at the end

    # the tasks' own words: the Horovod ranks stopped for the switch (the straggler's rank may still be
    # winding down when its chief has left: the launcher then stops the job), the ps chief resumed after `at`
    stopped = [line for line in lines if "switching to parameter_server; this task ends here" in line]
    stopped_early = "horovodrun stopped: the job's work was done" in output
    assert len(stopped) == 2 or (stopped_early and len(stopped) == 1), output[-5000:]
    assert any(f"resumed on parameter_server after epoch {at} (model and optimizer restored)" in line
               for line in lines), output[-5000:]
    # the parameter-server plan placed as --backend parameter_server would, and applied by its chief
    assert "chief:0 on w1:" in output and "worker:1 on w2:" in output and "ps:0 on p:" in output, output[-3000:]
    assert any("[chief:0@w1]" in line and "applying TFDIST_PLAN (inline JSON): parameter_server" in line
               for line in lines), output[-5000:]
    record = json.loads(out.read_text())  # written by the last chief, from its strategy object
    assert record["kind"] == "parameter_server" and record["variant"] == "parameter_server", record
    assert len(record["epoch_seconds"]) == EPOCHS - at, record  # it trained only the epochs left
    assert any(line.startswith("tfdist launch: adaptive run: horovod") for line in lines), output[-3000:]
    recorded(tmp_path / "runs", at)
    assert_nothing_left(lab)


def recorded(runs, at: int) -> None:
    """The chief of each plan wrote into one TensorBoard run, which `tfdist report` reads back as two
    segments on one clock: the ring's epochs, then the parameter servers' from the switch on."""
    from tfdist.report.data import segments
    from tfdist.report.events import load_runs
    from tfdist.report.tags import TRAIN, WALL_TIME_TAG

    (run,) = load_runs(str(runs))
    assert run.name.startswith("auto-b64-plan"), run.name
    parts = segments(run)
    assert [(p.variant.split("_")[0], p.first_epoch, p.last_epoch) for p in parts] == [
        ("horovod", 0, at), ("parameter", at, EPOCHS)], parts
    wall = run.series(TRAIN, WALL_TIME_TAG)
    assert wall.steps == tuple(range(EPOCHS)) and all(b > a for a, b in zip(wall.values, wall.values[1:])), wall
    print("segments: " + "; ".join(f"{p.variant} {p.epochs} {p.start_s:.1f}-{p.end_s:.1f} s, measured "
                                   f"{p.measured_examples_per_second:,.0f}, predicted "
                                   f"{p.predicted_examples_per_second:,.0f}" for p in parts))
    result = subprocess.run([sys.executable, "-m", "tfdist", "report", str(runs), "--out", str(runs / "report.png")],
                            capture_output=True, text=True, timeout=120, env=subprocess_env())
    assert result.returncode == 0 and (runs / "report.png").stat().st_size > 0, result.stderr[-2000:]
