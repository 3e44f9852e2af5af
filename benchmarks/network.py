"""Parameter servers vs ring-allreduce on the network lab, measured and predicted (`make bench-network`).

    .venv/bin/python benchmarks/network.py                  # full: 2 models x 4 rates x 2 speeds x 1-2 ps
    .venv/bin/python benchmarks/network.py --quick          # small model, unlimited and 50 Mbit, 1 repeat
    .venv/bin/python benchmarks/network.py --models small --rates 200,50 --ps 1 --json out.json
    .venv/bin/python benchmarks/network.py --replay out.json   # its table, predicted again (no lab)

Needs root (tfdist.testing.netlab). One lab: host c runs the launchers and the parameter-server
chief, w1 and w2 the workers (Horovod ranks), p1 and p2 the ps tasks. Per model three long-lived
jobs (Horovod, 1 ps, 2 ps), each started once with `tfdist launch`, are driven through timed phases
by command files (benchmarks/network_job.py); the jobs not running a phase are parked with SIGSTOP.
For each regime (link rate x identical or slowed w2) every job runs one phase per repeat, in
rotating order, and `tfdist advise` predicts the same regime from the measured compute time, link
rate and latency. The table compares measured and predicted examples/s and says whether the advice
picked the faster backend. See benchmarks/README.md, "Network benchmark".
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import table
from tfdist.launch.processes import kill_marked, marked_pids, stop_group

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PYTHON = sys.executable
TFDIST = str(Path(PYTHON).parent / "tfdist")
JOB_SCRIPT = HERE / "network_job.py"
HOSTS = ["c", "w1", "w2", "p1", "p2"]
MODELS = ("small", "large")
PARAMS = {"small": 669_706, "large": 5_824_522}  # workload.MODELS; network_job.py reports the real count
RATES = (None, 1000, 200, 50)  # Mbit/s; None: unlimited
SPEEDS = ("identical", "w2 slowed")
SLOW_CORES = 0.25  # w2's cgroup quota in the slowed regime
BATCH = 64
WORKERS = 2
MARKER = "TFDIST_BENCH_JOB"  # in the environment of every task of a job (the launcher's reaches them all)
HVD_MIN_STEPS, PS_MIN_STEPS = 3, 6
STOP_GRACE = 15.0  # s between the SIGTERM to a job's launcher group and the SIGKILL
MAX_STEPS = 5000
WITHIN = 25.0  # % : a prediction within this of the measurement counts as right
NOISE = ("I0000", "W0000", "E0000", "absl::InitializeLog", "rebuild TensorFlow", "instructions in", "oneDNN")


def log(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


def rate_name(rate: float | None) -> str:
    return "unlimited" if rate is None else f"{rate:g} Mbit"


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMI_", "SLURM_")) and k != "TF_CONFIG"}
    env["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1", PYTHONUNBUFFERED="1", **extra)
    return env


# --- the jobs -----------------------------------------------------------------------------------
class JobFailed(RuntimeError):
    """A job died or did not answer a command in time."""


class Job:
    """One long-lived `tfdist launch` job on the lab, driven by command files, parked by SIGSTOP."""

    def __init__(self, name: str, backend: str, ps: int, model: str, workdir: Path) -> None:
        self.name, self.backend, self.ps, self.model = name, backend, ps, model
        self.token = f"{name}-{uuid.uuid4().hex[:12]}"
        self.control = workdir / f"{model}-{name}"
        self.control.mkdir(parents=True)
        self.log_path = workdir / f"{model}-{name}.log"
        self.process: subprocess.Popen | None = None
        self.seq = 0
        self.parked: list[int] = []

    @property
    def per_step(self) -> int:
        """Examples per step, all workers together."""
        return BATCH * (WORKERS if self.backend == "horovod" else 1)

    @property
    def min_steps(self) -> int:
        return HVD_MIN_STEPS if self.backend == "horovod" else PS_MIN_STEPS

    def launch_options(self) -> list[str]:
        if self.backend == "horovod":
            return ["--backend", "horovod", "--hosts", "w1:1,w2:1", "--network-interface", "eth0"]
        ps_hosts = ",".join(f"p{i + 1}" for i in range(self.ps))
        hosts = ",".join(["w1:1", "w2:1", *(f"p{i + 1}:1" for i in range(self.ps)), "c:1"])
        return ["--hosts", hosts, "--chief-host", "c", "--ps-hosts", ps_hosts, "--workers", str(WORKERS),
                "--ps", str(self.ps)]

    def start(self, lab) -> None:
        argv = [PYTHON, "-m", "tfdist", "launch", *self.launch_options(), "--ssh-port", str(lab.ssh_port),
                "--ssh-identity-file", str(lab.identity_file), "--grace", "2", "--",
                PYTHON, str(JOB_SCRIPT), "--backend", self.backend, "--model", self.model,
                "--ps", str(self.ps), "--batch-size", str(BATCH), "--control", str(self.control)]
        env = child_env(**{MARKER: self.token, "HOROVOD_GLOO_TIMEOUT_SECONDS": "3600"})
        with open(self.log_path, "wb") as sink:
            self.process = lab.popen("c", argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=REPO, start_new_session=True)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no output)"
        useful = [line for line in text.splitlines() if line.strip() and not any(n in line for n in NOISE)]
        return "\n".join(useful[-lines:])

    def send(self, command: dict) -> int:
        self.seq += 1
        path = self.control / f"cmd-{self.seq}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(command))
        os.replace(tmp, path)
        return self.seq

    def run_phase(self, steps: int, tag: str, timeout: float) -> dict:
        """Run ``steps`` timed steps and return the job's result (JobFailed if it dies or hangs)."""
        seq = self.send({"steps": steps, "tag": tag})
        path = self.control / f"result-{seq}.json"
        deadline = time.monotonic() + timeout
        while not path.exists():
            if not self.alive():
                raise JobFailed(f"{self.model} {self.name} exited ({self.process.returncode}) during {tag}:\n"
                                f"{self.tail()}")
            if time.monotonic() > deadline:
                raise JobFailed(f"{self.model} {self.name}: no result for {tag} after {timeout:.0f} s:\n"
                                f"{self.tail()}")
            time.sleep(0.05)
        return json.loads(path.read_text())

    def training_pids(self) -> list[int]:
        """The job's training processes: python running network_job.py with this job's marker (never
        the launcher, the supervisors, horovodrun or ssh, whose heartbeats must go on)."""
        found = []
        for pid in marked_pids(MARKER, self.token):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) >= 2 and argv[1].endswith(b"network_job.py") and b"python" in argv[0]:
                found.append(pid)
        return found

    def park(self) -> None:
        self.parked = self.training_pids()
        for pid in self.parked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self.parked or self.training_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.parked = []

    def stop(self, timeout: float = 60.0) -> None:
        """Resume, send "quit", wait for the launcher; then stop its group (TERM, 15 s, KILL) and kill
        every process still carrying the job's marker (the lab's close would kill them anyway)."""
        self.resume()
        if self.process is None:
            return
        if self.alive():
            self.send({"quit": True})
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout)
        stop_group(self.process, grace=STOP_GRACE)
        kill_marked(MARKER, self.token)


def cpu_ticks(pids: list[int]) -> int:
    """utime + stime of ``pids`` (clock ticks; exited processes count 0)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total


# --- measuring the lab ------------------------------------------------------------------------------
_RECEIVER = """
import socket, sys, time
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
conn, _ = server.accept()
first = None; total = 0
while True:
    chunk = conn.recv(1 << 20)
    if not chunk:
        break
    if first is None:
        first = time.perf_counter()
    total += len(chunk)
print(total, time.perf_counter() - first, flush=True)
"""
_SENDER = """
import socket, sys
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
block = b"x" * (1 << 20)
for _ in range(int(sys.argv[3])):
    conn.sendall(block)
conn.close()
"""
_CONNECT_TIMES = """
import socket, statistics, sys, time
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    times.append(time.perf_counter() - start)
print(statistics.median(times))
"""


def link_rate_unlimited(lab, megabytes: int = 400) -> float:
    """The rate, in Mbit/s, of an unshaped lab link: one TCP transfer of ``megabytes`` MB from w1 to
    w2 (what `tfdist advise` is given for the "unlimited" rows). The lead may replace this with the
    probe of `tfdist advise --probe`."""
    port = "5399"
    receiver = lab.popen("w2", [PYTHON, "-c", _RECEIVER, lab.address("w2"), port], stdout=subprocess.PIPE,
                         text=True)
    try:
        receiver.stdout.readline()
        lab.run("w1", [PYTHON, "-c", _SENDER, lab.address("w2"), port, str(megabytes)], timeout=120, check=True)
        total, seconds = receiver.stdout.readline().split()
        receiver.wait(timeout=30)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    return int(total) * 8 / float(seconds) / 1e6


def latency_ms(lab) -> float:
    """One-way latency between w1 and w2: half the median time of a TCP connect to w2's sshd."""
    out = lab.run("w1", [PYTHON, "-c", _CONNECT_TIMES, lab.address("w2"), str(lab.ssh_port), "20"],
                  timeout=60, check=True).stdout
    return float(out.strip()) * 1000 / 2


def compute_times(lab, model: str, speed: str, seconds: float, workdir: Path) -> dict:
    """Step time of one process per worker host, both at once on unshaped links (the CPU sharing of the
    real run), with w2 slowed or not: {"w1_ms", "w2_ms"}."""
    lab.limit_cpu("w2", SLOW_CORES if speed == SPEEDS[1] else None)
    barrier = workdir / f"barrier-{model}-{speed.replace(' ', '_')}"
    barrier.mkdir()
    processes = {}
    for host in ("w1", "w2"):
        result = workdir / f"compute-{model}-{speed.replace(' ', '_')}-{host}.json"
        argv = [PYTHON, str(JOB_SCRIPT), "--backend", "single", "--model", model, "--seconds", str(seconds),
                "--barrier", str(barrier), "--result", str(result)]
        processes[host] = (lab.popen(host, argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=child_env(), cwd=REPO), result)
    times = {}
    for host, (process, result) in processes.items():
        _, err = process.communicate(timeout=600)
        if process.returncode != 0:
            raise JobFailed(f"compute timing on {host} failed ({process.returncode}): {err[-1500:]}")
        times[f"{host}_ms"] = json.loads(result.read_text())["step_ms"]
    return times


def advise(model: str, ps: int, step_ms: float, ratio: float, rate_mbit: float, latency: float,
           overheads: dict[str, float] | None = None) -> dict:
    """`tfdist advise ... --json`, run as a user would; ``overheads``: the fixed per-step costs
    (``allreduce``, ``ps``, in ms) calibrated by :meth:`Bench.calibrate`, else the advisor's defaults."""
    extra = []
    if overheads is not None:
        extra = ["--allreduce-overhead-ms", f"{overheads['allreduce']:.2f}",
                 "--ps-overhead-ms", f"{overheads['ps']:.2f}"]
    return run_advise(["advise", "--workers", str(WORKERS), "--ps", str(ps), "--params", str(PARAMS[model]),
                       "--batch-size", str(BATCH), "--step-ms", f"{step_ms:.3f}", "--worker-speeds",
                       f"1,{ratio:.4f}", "--bandwidth", f"{rate_mbit:.1f}mbit", "--latency-ms", f"{latency:.4f}",
                       *extra, "--json"])


def run_advise(arguments: list[str]) -> dict:
    """Run `tfdist ARGUMENTS` (an `advise ... --json` command line) and keep what the table needs."""
    argv = [TFDIST, *arguments]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=120, check=False)
    if done.returncode != 0:
        raise JobFailed(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-1500:]}")
    answer = json.loads(done.stdout)
    return {"command": " ".join(arguments), "recommended": answer["recommended"],
            "variant": answer.get("variant"),
            "horovod": answer["strategies"]["horovod"]["examples_per_second"],
            "parameter_server": answer["strategies"]["parameter_server"]["examples_per_second"],
            "horovod_step_ms": answer["strategies"]["horovod"]["step_ms"],
            "parameter_server_step_ms": answer["strategies"]["parameter_server"]["step_ms"]}


def replay(path: Path, json_out: str | None) -> int:
    """Predict a recorded run's regimes again with this tfdist (no lab, no root) and print its table:
    the measurements stay, each row's `tfdist advise` command line is run anew."""
    data = json.loads(path.read_text())
    settings = data["settings"]
    recorded = {row["speeds"] for row in data["rows"]}
    args = argparse.Namespace(**{"speeds": [s for s in SPEEDS if s in recorded], **settings, "json": json_out})
    bench = Bench(args, None, path.parent)
    bench.phases = data["phases"]
    bench.compute = {(c["model"], c["speeds"]): c for c in data["compute"]}
    bench.checks = data.get("parking_checks", {})
    bench.predict(data["link_rate_unlimited_mbit"], data["latency_ms"])
    rows = bench.rows()
    print(bench.report(rows, data["link_rate_unlimited_mbit"], data["latency_ms"]))
    load = data["load_average"]
    print(f"\nmeasured {data['started'][:16].replace('T', ' ')} UTC (wall time {data['wall_seconds'] / 60:.1f} min; "
          f"nproc {data['nproc']}; load {load[0][0]:.2f} before, {load[1][0]:.2f} after); predictions re-run now "
          f"with this tfdist ({path})")
    if json_out:
        Path(json_out).write_text(json.dumps({**data, "rows": rows, "replayed": True}, indent=2, default=str))
    return 0


# --- the run --------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace, lab, workdir: Path) -> None:
        self.args, self.lab, self.workdir = args, lab, workdir
        self.jobs: list[Job] = []
        self.phases: list[dict] = []
        self.predictions: dict[tuple, dict] = {}  # before the run, with the advisor's defaults: sizes phases
        self.final: dict[tuple, dict] = {}  # after the run, calibrated (Bench.predict): the table's
        self.overheads: dict[str, dict] = {}  # model -> the calibrated fixed costs per step
        self.compute: dict[tuple, dict] = {}
        self.step_ms: dict[tuple, float] = {}  # (job, model, rate, speed) -> last wall ms per step
        self.checks: dict[str, object] = {}

    def set_regime(self, rate: float | None, speed: str) -> None:
        for host in HOSTS:
            self.lab.shape(host, rate)
        self.lab.limit_cpu("w2", SLOW_CORES if speed == SPEEDS[1] else None)

    def steps_for(self, job: Job, rate: float | None, speed: str) -> int:
        key = (job.name, job.model, rate, speed)
        known = self.step_ms.get(key)
        if known is None:  # first time in this regime: the slower of the warm-up and the prediction
            warm = self.step_ms[(job.name, job.model, "warmup")]
            prediction = self.predictions[(job.model, rate, speed, job.ps or self.args.ps[0])]
            predicted = 1000 * job.per_step / prediction[job.backend]
            known = max(warm, predicted)
        return max(job.min_steps, min(MAX_STEPS, round(self.args.phase_seconds * 1000 / known)))

    def phase(self, job: Job, steps: int, tag: str) -> dict:
        expected = steps * self.step_ms.get((job.name, job.model, "warmup"), 1000) / 1000
        job.resume()
        try:
            return job.run_phase(steps, tag, timeout=max(300.0, 10 * self.args.phase_seconds + 5 * expected))
        finally:
            job.park()

    def start_jobs(self, model: str) -> list[Job]:
        jobs = [Job("horovod", "horovod", 0, model, self.workdir)]
        jobs += [Job(f"ps{p}", "parameter_server", p, model, self.workdir) for p in self.args.ps]
        self.jobs = jobs
        self.set_regime(None, SPEEDS[0])
        for job in jobs:  # one at a time: start-up (5 TensorFlow processes) is slow on 2 cores
            log(f"{model}: starting the {job.name} job")
            job.start(self.lab)
            first = job.run_phase(job.min_steps, "warm-up (tracing, broadcast)", timeout=600)
            warm = job.run_phase(max(job.min_steps, 3 * job.min_steps if model == "large" else 10 * job.min_steps),
                                 "warm-up (step time)", timeout=600)
            self.step_ms[(job.name, model, "warmup")] = 1000 * warm["seconds"] / warm["steps"]
            self.phases += [{**first, "job": job.name, "kind": "warmup"}, {**warm, "job": job.name, "kind": "warmup"}]
            log(f"{model}: {job.name} ready, {warm['step_ms']:.1f} ms/step unshaped; parked")
            job.park()
        return jobs

    def check_parking(self, jobs: list[Job], seconds: float) -> None:
        """Parked jobs cost ~0 CPU, and run again after ``seconds`` parked (all parked at once)."""
        pids = {job.name: job.training_pids() for job in jobs}
        before = {name: cpu_ticks(p) for name, p in pids.items()}
        time.sleep(seconds)
        for job in jobs:
            used = (cpu_ticks(pids[job.name]) - before[job.name]) / os.sysconf("SC_CLK_TCK")
            result = self.phase(job, job.min_steps, f"resume after {seconds:.0f} s parked")
            self.checks[f"{job.model} {job.name}"] = {
                "parked_seconds": seconds, "processes": len(pids[job.name]),
                "cpu_seconds_while_parked": round(used, 3), "resumed_steps": result["steps"],
                "resumed_step_ms": round(result["step_ms"], 1)}
            log(f"parking check {job.model} {job.name}: {len(pids[job.name])} processes, {used:.2f} CPU s in "
                f"{seconds:.0f} s parked; resumed ({result['steps']} steps, {result['step_ms']:.1f} ms/step)")

    def run_model(self, model: str, link_rate: float, latency: float) -> None:
        args = self.args
        for speed in args.speeds:
            self.set_regime(None, speed)
            log(f"{model}: timing compute, {speed} (one process on w1 and one on w2 at once)")
            self.compute[(model, speed)] = compute_times(self.lab, model, speed, args.compute_seconds, self.workdir)
            c = self.compute[(model, speed)]
            log(f"{model}: compute {speed}: w1 {c['w1_ms']:.1f} ms, w2 {c['w2_ms']:.1f} ms per step")
        for rate in args.rates:
            for speed in args.speeds:
                c = self.compute[(model, speed)]
                for ps in args.ps:
                    self.predictions[(model, rate, speed, ps)] = advise(
                        model, ps, c["w1_ms"], c["w1_ms"] / c["w2_ms"],
                        link_rate if rate is None else rate, latency)
        jobs = self.start_jobs(model)
        if args.park_check and model == args.models[0]:
            self.check_parking([jobs[0], jobs[-1]], args.park_check)
        regimes = [(rate, speed) for rate in args.rates for speed in args.speeds]
        for repeat in range(args.repeats):
            order = regimes if repeat % 2 == 0 else regimes[::-1]
            for index, (rate, speed) in enumerate(order):
                self.set_regime(rate, speed)
                turn = (index + repeat) % len(jobs)
                for job in jobs[turn:] + jobs[:turn]:
                    steps = self.steps_for(job, rate, speed)
                    result = self.phase(job, steps, f"{rate_name(rate)}, {speed}, repeat {repeat}")
                    self.step_ms[(job.name, model, rate, speed)] = 1000 * result["seconds"] / result["steps"]
                    self.phases.append({**result, "job": job.name, "kind": "timed", "rate_mbit": rate,
                                        "speeds": speed, "repeat": repeat})
                    log(f"{model} {rate_name(rate)} {speed} r{repeat} {job.name}: {result['steps']} steps, "
                        f"{result['examples_per_second']:,.0f} ex/s ({result['seconds']:.1f} s)")
        self.set_regime(None, SPEEDS[0])
        self.stop_jobs()

    def stop_jobs(self) -> None:
        for job in self.jobs:
            job.resume()
        for job in self.jobs:
            job.stop()
        self.jobs = []

    # --- the table ----------------------------------------------------------------------------
    def measured(self, model: str, job: str, rate: float | None, speed: str) -> list[float]:
        return [p["examples_per_second"] for p in self.phases if p["kind"] == "timed" and p["model"] == model
                and p["job"] == job and p["rate_mbit"] == rate and p["speeds"] == speed]

    def calibrate(self, model: str, link_rate: float, latency: float) -> dict[str, float] | None:
        """The fixed cost per step beyond compute and transfers (ms), from the unlimited-link, identical-
        worker regime: its measured step (median over repeats) minus what the advisor predicts with no
        fixed cost. ``{"allreduce": ms, "ps1": ms, "ps2": ms}``; None when that regime was not run. These
        rows are the calibration, every other regime is predicted from them."""
        compute = self.compute.get((model, SPEEDS[0]))
        hvd = self.measured(model, "horovod", None, SPEEDS[0])
        if compute is None or not hvd:
            return None
        costs = {}
        for ps in self.args.ps:
            pss = self.measured(model, f"ps{ps}", None, SPEEDS[0])
            base = advise(model, ps, compute["w1_ms"], compute["w1_ms"] / compute["w2_ms"], link_rate, latency,
                          {"allreduce": 0.0, "ps": 0.0})
            costs["allreduce"] = max(0.0, 1000 * BATCH * WORKERS / statistics.median(hvd) - base["horovod_step_ms"])
            if pss:  # identical workers: each worker's own step is WORKERS x the time per dispatched step
                costs[f"ps{ps}"] = max(0.0, 1000 * BATCH * WORKERS / statistics.median(pss)
                                       - base["parameter_server_step_ms"])
        return costs

    def predict(self, link_rate: float, latency: float) -> None:
        """Every regime's prediction, with the fixed costs calibrated per model (:meth:`calibrate`)."""
        for model in self.args.models:
            costs = self.calibrate(model, link_rate, latency)
            if costs is not None:
                self.overheads[model] = costs
            for rate in self.args.rates:
                for speed in self.args.speeds:
                    c = self.compute.get((model, speed))
                    for ps in self.args.ps:
                        if c is None:
                            continue
                        fixed = None
                        if costs is not None and f"ps{ps}" in costs:
                            fixed = {"allreduce": costs["allreduce"], "ps": costs[f"ps{ps}"]}
                        self.final[(model, rate, speed, ps)] = advise(
                            model, ps, c["w1_ms"], c["w1_ms"] / c["w2_ms"], link_rate if rate is None else rate,
                            latency, fixed)

    def rows(self) -> list[dict]:
        rows = []
        for model in self.args.models:
            for rate in self.args.rates:
                for speed in self.args.speeds:
                    hvd = self.measured(model, "horovod", rate, speed)
                    for ps in self.args.ps:
                        pss = self.measured(model, f"ps{ps}", rate, speed)
                        key = (model, rate, speed, ps)
                        pred = self.final.get(key) or self.predictions.get(key)
                        if pred is None:
                            continue
                        row = {"model": model, "rate_mbit": rate, "speeds": speed, "ps": ps,
                               "horovod": hvd, "parameter_server": pss, "prediction": pred,
                               "compute": self.compute.get((model, speed)),
                               "calibration": rate is None and speed == SPEEDS[0] and model in self.overheads}
                        if hvd and pss:
                            h, p = statistics.median(hvd), statistics.median(pss)
                            row["faster"] = "horovod" if h >= p else "parameter_server"
                            row["advice_right"] = pred["recommended"] == row["faster"]
                            row["error_pct"] = {"horovod": 100 * (pred["horovod"] - h) / h,
                                                "parameter_server": 100 * (pred["parameter_server"] - p) / p}
                        rows.append(row)
        return rows

    def report(self, rows: list[dict], link_rate: float, latency: float) -> str:
        short = {"horovod": "horovod", "parameter_server": "ps", "multi_worker_mirrored": "mwms"}
        lines = []
        for row in rows:
            pred, hvd, pss = row["prediction"], row["horovod"], row["parameter_server"]
            err = row.get("error_pct", {})
            mark = " *" if row.get("calibration") else ""
            lines.append([row["model"], rate_name(row["rate_mbit"]) + mark, row["speeds"], str(row["ps"]),
                          table.rate(hvd, self.args.repeats), table.rate(pss, self.args.repeats),
                          table.ratio(hvd, pss),
                          f"{pred['horovod']:,.0f} ({err['horovod']:+.0f}%)" if err else f"{pred['horovod']:,.0f}",
                          f"{pred['parameter_server']:,.0f} ({err['parameter_server']:+.0f}%)" if err
                          else f"{pred['parameter_server']:,.0f}",
                          short.get(pred["recommended"], pred["recommended"]),
                          short.get(row.get("faster", "-"), "-"),
                          {True: "yes", False: "NO"}.get(row.get("advice_right"), "-")])
        headers = ["model", "link", "workers", "ps", "horovod ex/s", "ps ex/s", "hvd/ps", "predicted hvd (err)",
                   "predicted ps (err)", "advice", "faster", "right?"]
        parts = ["Examples/s, both workers together (batch 64 each): median (min-max) over repeats; "
                 "predicted by `tfdist advise` (error vs the measured median)",
                 table.render(headers, lines), ""]
        judged = [r for r in rows if "advice_right" in r]
        predicted = [r for r in judged if not r.get("calibration")]
        errors = [(r, name, e) for r in judged for name, e in r["error_pct"].items()]
        for label, subset in (("all regimes", judged), ("without the calibration rows (*)", predicted)):
            if not subset:
                continue
            right = sum(1 for r in subset if r["advice_right"])
            close = sum(1 for r in subset for e in r["error_pct"].values() if abs(e) <= WITHIN)
            parts.append(f"{label}: advice picked the faster backend in {right}/{len(subset)} "
                         f"({100 * right / len(subset):.0f} %; target >= 90 %); predictions within "
                         f"+-{WITHIN:.0f} %: {close}/{2 * len(subset)}")
        if self.overheads:
            parts.append("* calibration: the fixed cost per step beyond compute and transfers, measured on "
                         "unlimited links with identical workers and given to every row's `tfdist advise` "
                         "(--allreduce-overhead-ms, --ps-overhead-ms): "
                         + "; ".join(f"{m}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in costs.items())
                                     for m, costs in self.overheads.items()))
        for r in judged:
            if not r["advice_right"]:
                parts.append(f"  advice miss: {r['model']} {rate_name(r['rate_mbit'])} {r['speeds']} ps={r['ps']}: "
                             f"advised {r['prediction']['recommended']}, measured faster {r['faster']}")
        for r, name, e in errors:
            if abs(e) > WITHIN:
                parts.append(f"  prediction miss: {r['model']} {rate_name(r['rate_mbit'])} {r['speeds']} "
                             f"ps={r['ps']} {name}: {e:+.0f} %")
        comp = ", ".join(f"{m} {s}: w1 {c['w1_ms']:.1f} ms, w2 {c['w2_ms']:.1f} ms"
                         for (m, s), c in self.compute.items())
        parts += ["", f"compute per step (one process on w1 and on w2 at once, batch 64): {comp}",
                  f"unlimited links: {link_rate:,.0f} Mbit/s measured by link_rate_unlimited() (one TCP transfer "
                  f"w1->w2); latency {latency:.3f} ms (half a TCP connect, w1->w2)"]
        for name, check in self.checks.items():
            parts.append(f"parking check ({name}): {check}")
        return "\n".join(parts)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small model, unlimited and 50 Mbit, 1 repeat, short phases (a few minutes)")
    parser.add_argument("--models", help="comma-separated: small,large (default both; --quick: small)")
    parser.add_argument("--rates", help="Mbit/s, comma-separated, 'unlimited' for none "
                                        "(default unlimited,1000,200,50; --quick: unlimited,50)")
    parser.add_argument("--ps", default="1,2", help="ps task counts to run: 1, 2 or 1,2 (default 1,2)")
    parser.add_argument("--repeats", type=int, help="phases per job and regime (default 3; --quick: 1)")
    parser.add_argument("--phase-seconds", type=float, help="aimed length of a timed phase (default 6; --quick: 2)")
    parser.add_argument("--compute-seconds", type=float, help="length of the compute timing (default 4; --quick: 2)")
    parser.add_argument("--park-check", type=float, default=None,
                        help="park one job this many seconds and check it costs no CPU and resumes "
                             "(default 60; --quick: 10; 0: skip)")
    parser.add_argument("--speeds", default="identical,slowed",
                        help="worker speed regimes: identical, slowed (w2 at 0.25 cores) or both (default)")
    parser.add_argument("--workdir", help="where the jobs' control files and logs go (default: a new directory "
                                          "in /tmp, removed after a successful run; every lab host must see it)")
    parser.add_argument("--json", metavar="FILE", help="also write every phase and every row here")
    parser.add_argument("--replay", metavar="FILE", help="no lab: print the table of a run written with --json, "
                                                         "its regimes predicted again by this tfdist")
    args = parser.parse_args(argv)
    if args.replay:
        return args
    names = {"identical": SPEEDS[0], "slowed": SPEEDS[1]}
    try:
        args.speeds = [names[s.strip()] for s in args.speeds.split(",") if s.strip()]
    except KeyError:
        parser.error(f"--speeds {args.speeds!r}: give identical, slowed or identical,slowed")
    if not args.speeds:
        parser.error("--speeds: give identical, slowed or identical,slowed")
    quick = args.quick
    args.models = [m.strip() for m in (args.models or ("small" if quick else ",".join(MODELS))).split(",") if m.strip()]
    if not args.models or set(args.models) - set(MODELS):
        parser.error(f"--models: choose from {','.join(MODELS)}")
    rates = args.rates or ("unlimited,50" if quick else "unlimited,1000,200,50")
    try:
        args.rates = [None if r.strip() == "unlimited" else float(r) for r in rates.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--rates {rates!r}: give Mbit/s numbers or 'unlimited', e.g. unlimited,200,50")
    if not args.rates or any(r is not None and r <= 0 for r in args.rates):
        parser.error("--rates: give at least one positive rate (Mbit/s) or 'unlimited'")
    try:
        args.ps = sorted({int(p) for p in args.ps.split(",")})
    except ValueError:
        parser.error("--ps: give 1, 2 or 1,2")
    if not args.ps or set(args.ps) - {1, 2}:
        parser.error("--ps: give 1, 2 or 1,2 (the lab has two ps hosts)")
    args.repeats = args.repeats or (1 if quick else 3)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    args.phase_seconds = args.phase_seconds or (2.0 if quick else 6.0)
    args.compute_seconds = args.compute_seconds or (2.0 if quick else 4.0)
    if args.park_check is None:
        args.park_check = 10.0 if quick else 60.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replay:
        return replay(Path(args.replay), args.json)
    from tfdist.testing.netlab import Lab

    def terminate(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    started, wall_start = datetime.datetime.now(datetime.timezone.utc), time.monotonic()
    load_before = os.getloadavg()
    log(f"network benchmark: models {','.join(args.models)}, rates {','.join(rate_name(r) for r in args.rates)}, "
        f"ps {args.ps}, {args.repeats} repeat(s), phases ~{args.phase_seconds:g} s; load {load_before[0]:.2f}")
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="tfdist-bench-network-", dir="/tmp"))
    bench, failure, link_rate, latency = None, None, 0.0, 0.0
    code = 1
    try:
        with Lab(HOSTS) as lab:
            bench = Bench(args, lab, workdir)
            try:
                link_rate = link_rate_unlimited(lab)
                latency = latency_ms(lab)
                log(f"unlimited link: {link_rate:,.0f} Mbit/s; latency {latency:.3f} ms")
                for model in args.models:
                    bench.run_model(model, link_rate, latency)
            except JobFailed as exc:  # report what was measured before the failure
                failure = str(exc)
                print(f"FAILED: {exc}", file=sys.stderr, flush=True)
            finally:
                bench.stop_jobs()
        bench.predict(link_rate, latency)
        rows = bench.rows()
        wall, load_after = time.monotonic() - wall_start, os.getloadavg()
        print(bench.report(rows, link_rate, latency))
        if failure:
            print(f"\nFAILED (the rows above are what was measured before): {failure}")
        print(f"\n{started:%Y-%m-%d %H:%M} UTC; wall time {wall / 60:.1f} min; nproc {os.cpu_count()}; load average "
              f"(1, 5, 15 min) {', '.join(f'{x:.2f}' for x in load_before)} before, "
              f"{', '.join(f'{x:.2f}' for x in load_after)} after (above nproc: other processes shared the cores)",
              flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({
                "settings": {k: v for k, v in vars(args).items() if k != "json"}, "started": started.isoformat(),
                "wall_seconds": round(wall, 1), "nproc": os.cpu_count(), "load_average": [load_before, load_after],
                "link_rate_unlimited_mbit": link_rate, "latency_ms": latency, "parking_checks": bench.checks,
                "compute": [{"model": m, "speeds": s, **c} for (m, s), c in bench.compute.items()],
                "phases": bench.phases, "rows": rows, "failure": failure}, indent=2, default=str))
        code = 0 if not failure and rows and all("advice_right" in r for r in rows) else 1
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc}); everything stopped", file=sys.stderr, flush=True)
        code = 130
    finally:
        if code == 0 and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"the jobs' logs and control files: {workdir}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
