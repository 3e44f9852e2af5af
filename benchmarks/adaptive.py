"""An adaptive `tfdist launch --backend auto` run against the fixed plans, while the lab changes mid-run.

    .venv/bin/python benchmarks/adaptive.py                      # scenarios A-D x 3 repeats (~2 h)
    .venv/bin/python benchmarks/adaptive.py --scenarios B --repeats 1 --json adaptive.json

Needs root (tfdist.testing.netlab). One lab: host c runs every launcher; w1 and w2 the workers, p1
the ps task. Each scenario starts from identical workers on unlimited links; the job's chief prints
each epoch's end (``AUTOJOB_EPOCH``), and after a third of the epochs (two thirds for D's recovery)
the lab changes:

* ``A`` steady: nothing changes;
* ``B`` straggler: w2 drops to ``--slow-cores`` of a core (default a quarter);
* ``C`` link: both worker links drop to 50 Mbit/s;
* ``D`` recovery: B, then w2 gets its core back at two thirds.

In each scenario, for each repeat (the jobs in rotating order), one run of each of:

* ``horovod``: ``tfdist launch --backend horovod --hosts w1:1,w2:1 -- python auto_job.py --backend horovod``;
* ``ps``: ``tfdist launch --hosts w1:1,w2:1,p1:1 --workers 2 --ps 1 -- python auto_job.py --backend
  parameter_server`` (the placement ``auto`` gives parameter servers);
* ``adaptive``: ``tfdist launch --backend auto --hosts w1:1,w2:1,p1:1 --workers 2 --ps 1 -- python
  auto_job.py`` (no ``--model``: the links are probed, the job re-fits the first plan and switches).

Every job trains workload.py's small MLP (669,706 parameters) at batch 64 per worker on the same
examples per epoch, ``--epochs`` epochs: the shipped digits (``auto_job.py --data digits``: the 8x8
digits upscaled to the MLP's 784 inputs, the last 297 held out), or ``--data random``. The table gives
each job's wall time from launch to exit (start-up, probe and switches included) as median (min-max),
the adaptive run's switches, the ratios the issue's targets name (adaptive against the plan auto chose
at launch, and against the best fixed plan) and each job's accuracy on the held-out digits (median).
Targets (reported, not asserted): B and C <= 0.85x the launch plan and <= 0.95x the best fixed plan
with one switch per change, and the adaptive run's accuracy within 0.5 points of the launch plan's; A
at most 1/0.97 of the fixed plan's time, with no switch; D no slower than B's adaptive run. The
machine's load is printed before and after.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_runner import LabRunner, git_commit, measure_interruptibly, sigterm_as_interrupt  # noqa: E402
from table import median, rate, render  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PYTHON = sys.executable
HOSTS = ["c", "w1", "w2", "p1"]
JOBS = ("horovod", "ps", "adaptive")
EPOCH_LINE = re.compile(r"AUTOJOB_EPOCH (\d+)")
TIMED_LINE = re.compile(r"AUTOJOB_(?:STAGE (\w+)|EPOCH (\d+)) (\d+\.\d+)\s*$", re.M)
SWITCH_LINE = "tfdist launch: re-planned at epoch "
LAUNCHED = re.compile(r"tfdist launch --backend auto: launching (\w+) \((\w+)\)")
TARGET_CHANGED = 0.85  # B, C: adaptive / the launch plan
TARGET_BEST = 0.95  # B, C: adaptive / the best fixed plan
TARGET_STEADY = 0.97  # A: the fixed plan / adaptive, at least
TARGET_ACCURACY_POINTS = 0.5  # B, C: |adaptive - the launch plan| in held-out accuracy, at most (points)


@dataclasses.dataclass(frozen=True)
class Scenario:
    key: str
    name: str
    slow: bool = False
    shaped: bool = False
    recovers: bool = False


SCENARIOS = (Scenario("A", "steady"), Scenario("B", "straggler", slow=True),
             Scenario("C", "link", shaped=True), Scenario("D", "recovery", slow=True, recovers=True))


def changes(scenario: Scenario, epochs: int) -> list[tuple[int, str]]:
    """``(epochs done, change)`` in the order they happen: after a third of the epochs the straggler or
    the slow links, after two thirds the recovery."""
    found = []
    if scenario.slow:
        found.append((max(1, epochs // 3), "slow"))
    if scenario.shaped:
        found.append((max(1, epochs // 3), "shape"))
    if scenario.recovers:
        found.append((max(2, 2 * epochs // 3), "recover"))
    return found


def launch_argv(job: str, steps: int, epochs: int, out: Path, ssh_port: int, identity: Path,
                data: str = "digits") -> list[str]:
    """The `tfdist launch` command line of ``job`` (run on host c)."""
    ssh = ["--ssh-port", str(ssh_port), "--ssh-identity-file", str(identity), "--grace", "2"]
    script = [PYTHON, str(HERE / "auto_job.py"), "--steps", str(steps), "--warmup-epochs", "1",
              "--epochs", str(epochs - 1), "--progress", "--data", data, "--out", str(out)]
    if job == "horovod":
        return [PYTHON, "-m", "tfdist", "launch", "--backend", "horovod", "--hosts", "w1:1,w2:1", *ssh, "--",
                *script, "--backend", "horovod"]
    if job == "ps":
        return [PYTHON, "-m", "tfdist", "launch", "--hosts", "w1:1,w2:1,p1:1", "--workers", "2", "--ps", "1",
                *ssh, "--", *script, "--backend", "parameter_server"]
    if job == "adaptive":
        return [PYTHON, "-m", "tfdist", "launch", "--backend", "auto", "--hosts", "w1:1,w2:1,p1:1", "--workers",
                "2", "--ps", "1", "--save-plan", str(out.with_name(out.stem + "-plan.json")), *ssh, "--", *script]
    raise ValueError(f"unknown job {job!r}; fix: one of {', '.join(JOBS)}")


def rotated(jobs: Sequence[str], repeat: int) -> list[str]:
    turn = repeat % len(jobs)
    return [*jobs[turn:], *jobs[:turn]]


def summarize(records: Sequence[dict], scenarios: Sequence[Scenario]) -> list[dict]:
    """One row per scenario: each job's wall seconds, the adaptive run's switches and launch plan, the
    ratios against the launch plan and the best fixed plan, and whether the targets were met."""
    rows = []
    for scenario in scenarios:
        runs = [r for r in records if r["scenario"] == scenario.key and r.get("ok")]
        seconds = {job: [r["seconds"] for r in runs if r["job"] == job] for job in JOBS}
        accuracy = {job: median([r["val_accuracy"] for r in runs if r["job"] == job
                                 and r.get("val_accuracy") is not None]) for job in JOBS}
        adaptive = [r for r in runs if r["job"] == "adaptive"]
        launched = sorted({r.get("launched") for r in adaptive if r.get("launched")})
        fixed = {job: median(seconds[job]) for job in ("horovod", "ps")}
        mid = median(seconds["adaptive"])
        plan_job = "ps" if launched == ["parameter_server"] else "horovod" if launched == ["horovod"] else None
        at_launch = fixed.get(plan_job) if plan_job else None
        best = min((v for v in fixed.values() if v is not None), default=None)
        launch_accuracy = accuracy.get(plan_job) if plan_job else None
        points = (100 * abs(accuracy["adaptive"] - launch_accuracy)
                  if accuracy["adaptive"] is not None and launch_accuracy is not None else None)
        row = {"scenario": scenario.key, "name": scenario.name, "seconds": seconds, "launched": launched,
               "accuracy": accuracy, "accuracy_points": points,
               "switches": [r.get("switches", 0) for r in adaptive],
               "vs_launch_plan": mid / at_launch if mid and at_launch else None,
               "vs_best_fixed": mid / best if mid and best else None}
        expected_switches = len(changes(scenario, 3))
        if mid is None or at_launch is None:
            row["met"] = None  # nothing to compare: a failed run, or no plan recorded
        elif scenario.key in ("B", "C"):
            row["met"] = (row["vs_launch_plan"] is not None and row["vs_launch_plan"] <= TARGET_CHANGED
                          and row["vs_best_fixed"] is not None and row["vs_best_fixed"] <= TARGET_BEST
                          and all(s == expected_switches for s in row["switches"])
                          and (points is None or points <= TARGET_ACCURACY_POINTS))
        elif scenario.key == "A":
            row["met"] = (row["vs_launch_plan"] is not None and row["vs_launch_plan"] <= 1 / TARGET_STEADY
                          and not any(row["switches"]))
        else:
            row["met"] = None  # D is compared with B's adaptive run in the report
        rows.append(row)
    return rows


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render_report(rows: Sequence[dict], repeats: int) -> str:
    headers = ["scenario", *(f"{job} s" for job in JOBS), "launched", "switches", "vs launch plan",
               "vs best fixed", "accuracy h/ps/adaptive", "target"]
    table = [[f"{row['scenario']} {row['name']}", *(rate(row["seconds"][job], repeats) for job in JOBS),
              ",".join(row["launched"]) or "-", ",".join(map(str, row["switches"])) or "-",
              _x(row["vs_launch_plan"]), _x(row["vs_best_fixed"]),
              "/".join("-" if row.get("accuracy", {}).get(job) is None else f"{100 * row['accuracy'][job]:.1f}"
                       for job in JOBS),
              {True: "met", False: "missed", None: "-"}[row["met"]]] for row in rows]
    return render(headers, table)


def job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMI_", "SLURM_", "TFDIST_PLAN", "TFDIST_ADAPT"))
           and k != "TF_CONFIG"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1", PYTHONUNBUFFERED="1",
               PATH=f"{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


class Runner(LabRunner):
    """One job at a time on host c, the lab changed as the job's epochs go by, always stopped."""

    hosts = HOSTS

    def __init__(self, lab, workdir: Path, timeout: float, slow_cores: float, data: str = "digits") -> None:
        super().__init__(lab)
        self.workdir, self.timeout, self.slow_cores, self.data = workdir, timeout, slow_cores, data

    def reset(self) -> None:
        self.lab.limit_cpu("w2", None)
        for host in HOSTS:
            self.lab.shape(host, None)

    def apply(self, change: str) -> None:
        if change == "slow":
            self.lab.limit_cpu("w2", self.slow_cores)
        elif change == "shape":
            self.lab.shape("w1", 50)
            self.lab.shape("w2", 50)
        elif change == "recover":
            self.lab.limit_cpu("w2", None)

    def follow(self, log_path: Path, planned: list[tuple[int, str]], stop: threading.Event,
               applied: list[tuple[int, str, float]]) -> None:
        """Apply each planned change once the log shows that many epochs done."""
        pending = list(planned)
        while pending and not stop.is_set():
            done = len(set(EPOCH_LINE.findall(log_path.read_text(errors="replace")))) if log_path.exists() else 0
            while pending and done >= pending[0][0]:
                epochs, change = pending.pop(0)
                self.apply(change)
                applied.append((epochs, change, time.monotonic()))
            stop.wait(0.2)

    def run(self, scenario: Scenario, job: str, repeat: int, steps: int, epochs: int) -> dict:
        self.count += 1
        self.reset()
        out = self.workdir / f"run{self.count}.json"
        log_path = self.workdir / f"run{self.count}-{job}.log"
        argv = launch_argv(job, steps, epochs, out, self.lab.ssh_port, self.lab.identity_file, self.data)
        stop, applied = threading.Event(), []
        follower = threading.Thread(target=self.follow, args=(log_path, changes(scenario, epochs), stop, applied),
                                    daemon=True)
        started, wall_start = time.monotonic(), time.time()
        follower.start()
        try:
            code = self.run_job("c", argv, log_path, job_env(), REPO, self.timeout)
        finally:
            stop.set()
            follower.join()
            self.reset()
        seconds = time.monotonic() - started
        text = log_path.read_text(errors="replace")
        result = json.loads(out.read_text()) if out.exists() else {}
        launched = LAUNCHED.search(text)
        return {"scenario": scenario.key, "job": job, "repeat": repeat, "exit_code": code, "seconds": seconds,
                "ok": code == 0 and bool(result), "left_on_hosts": self.leftovers(),
                "epochs_seen": sorted({int(e) for e in EPOCH_LINE.findall(text)}),
                "changes": [(e, c, t - started) for e, c, t in applied],
                "launched": launched.group(1) if launched else None,
                "switches": sum(1 for line in text.splitlines() if line.startswith(SWITCH_LINE)),
                "switch_lines": [line for line in text.splitlines() if line.startswith(SWITCH_LINE)
                                 or line.startswith("tfdist launch: adaptive run:")],
                "final_loss": result.get("final_loss"), "val_accuracy": result.get("val_accuracy"),
                "kind": result.get("kind"), "timeline": timeline(text, wall_start)}


def timeline(text: str, wall_start: float) -> list[tuple[str, float]]:
    """The chief's stages and epoch ends in a job's log (auto_job.py's ``--progress`` lines with the
    wall clock), as seconds since the launch: ``[("strategy", 7.9), ("epoch 0", 15.2), ...]``."""
    found = []
    for stage, epoch, moment in TIMED_LINE.findall(text):
        found.append((stage or f"epoch {epoch}", round(float(moment) - wall_start, 1)))
    return found


def beyond_epochs(record: dict) -> str:
    """Where a run's time outside its epochs went, from its timeline: to the first ``strategy`` (start-up),
    from the last epoch's end to ``fitted`` (the end of fit), from ``written`` to the exit."""
    moments = record.get("timeline") or []
    firsts = [t for name, t in moments if name == "strategy"]
    epochs = [t for name, t in moments if name.startswith("epoch")]
    fitted = [t for name, t in moments if name == "fitted"]
    written = [t for name, t in moments if name == "written"]
    if not (firsts and epochs and fitted and written):
        return ""
    return (f"; start-up {firsts[0]:.1f} s, last epoch to fitted {fitted[-1] - epochs[-1]:.1f} s, written to "
            f"exit {record['seconds'] - written[-1]:.1f} s")


def describe(record: dict) -> str:
    loss, accuracy = record.get("final_loss"), record.get("val_accuracy")
    return (f"{record['scenario']} {record['job']:>8} #{record['repeat']}: {record['seconds']:6.1f} s, exit "
            f"{record['exit_code']}, epochs {len(record['epochs_seen'])}, ended on {record.get('kind')}, "
            f"switches {record['switches']}, final loss {'-' if loss is None else f'{loss:.4f}'}, held-out "
            f"accuracy {'-' if accuracy is None else f'{100 * accuracy:.1f} %'}"
            + beyond_epochs(record) + (f", LEFT {record['left_on_hosts']}" if record["left_on_hosts"] else ""))


def measure(args: argparse.Namespace, records: list[dict]) -> None:
    from tfdist.testing.netlab import Lab

    with tempfile.TemporaryDirectory(prefix="tfdist-adaptive-", dir="/tmp") as scratch, Lab(HOSTS) as lab:
        workdir = Path(args.keep or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        runner = Runner(lab, workdir, args.timeout, args.slow_cores, args.data)
        try:
            for scenario in args.scenarios:
                for repeat in range(args.repeats):
                    for job in rotated(args.jobs, repeat):
                        record = runner.run(scenario, job, repeat, args.steps, args.epochs)
                        records.append(record)
                        print(describe(record), flush=True)
                        for line in record["switch_lines"]:
                            print(f"    {line}", flush=True)
        finally:
            runner.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="A,B,C,D", help="comma-separated, from A,B,C,D (default all)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per job and scenario (default 3)")
    parser.add_argument("--epochs", type=int, default=12, help="epochs per run, the warm-up included (default 12)")
    parser.add_argument("--steps", type=int, default=400, help="Horovod steps per rank and epoch (default 400)")
    parser.add_argument("--slow-cores", type=float, default=0.25, help="w2's cores in B and D (default 0.25)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per run before it is killed")
    parser.add_argument("--json", metavar="FILE", help="write every run and every row here")
    parser.add_argument("--jobs", default=",".join(JOBS),
                        help=f"comma-separated, from {','.join(JOBS)} (default all; the ratios need all three)")
    parser.add_argument("--keep", metavar="DIR", help="keep each run's log and result in DIR (default: deleted)")
    parser.add_argument("--data", choices=("digits", "random"), default="digits",
                        help="what the jobs train on (default the shipped digits, with a held-out accuracy)")
    args = parser.parse_args(argv)
    known = {s.key: s for s in SCENARIOS}
    keys = [k.strip().upper() for k in args.scenarios.split(",") if k.strip()]
    if not keys or any(k not in known for k in keys):
        parser.error(f"--scenarios {args.scenarios!r}: give scenarios from A,B,C,D, comma-separated, e.g. B,C")
    if args.repeats < 1 or args.epochs < 3 or args.steps < 1 or not 0 < args.slow_cores <= 2:
        parser.error("--repeats >= 1, --epochs >= 3, --steps >= 1 and 0 < --slow-cores <= 2")
    args.scenarios = [s for s in SCENARIOS if s.key in keys]
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    if not jobs or any(j not in JOBS for j in jobs):
        parser.error(f"--jobs {args.jobs!r}: give jobs from {','.join(JOBS)}, comma-separated, e.g. adaptive")
    args.jobs = [j for j in JOBS if j in jobs]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sigterm_as_interrupt()
    commit = git_commit(REPO)
    started, load_before = datetime.datetime.now(datetime.timezone.utc), os.getloadavg()
    print(f"adaptive: {started:%Y-%m-%d %H:%M} UTC, commit {commit}, nproc {os.cpu_count()}, load average "
          f"(1, 5, 15 min) {', '.join(f'{x:.2f}' for x in load_before)}; scenarios "
          f"{', '.join(s.key + ' ' + s.name for s in args.scenarios)}; {args.repeats} repeat(s), {args.epochs} "
          f"epochs of {args.steps} steps per rank", flush=True)
    wall_start = time.monotonic()
    records: list[dict] = []
    interrupted = measure_interruptibly(measure, args, records)
    wall, load_after = time.monotonic() - wall_start, os.getloadavg()
    rows = summarize(records, args.scenarios)
    print()
    print(render_report(rows, args.repeats))
    print(f"\nwall time {wall / 60:.1f} min; load average (1, 5, 15 min) "
          f"{', '.join(f'{x:.2f}' for x in load_before)} before, {', '.join(f'{x:.2f}' for x in load_after)} after",
          flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"started": started.isoformat(), "commit": commit,
                                               "settings": {k: (v if k != "scenarios" else [s.key for s in v])
                                                            for k, v in vars(args).items()},
                                               "wall_seconds": wall, "load_before": load_before,
                                               "load_after": load_after, "rows": rows, "runs": records},
                                              indent=1, default=str))
    if interrupted:
        return 130
    return 0 if records and all(r["ok"] and not r["left_on_hosts"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
