"""Hand-written baselines vs tfdist, Horovod and ParameterServerStrategy, in one run.

    .venv/bin/python benchmarks/compare.py                 # full: ~10 min on 2 cores
    .venv/bin/python benchmarks/compare.py --quick         # smoke check: ~3 min
    .venv/bin/python benchmarks/compare.py --models small --json results.json

Every configuration runs as its own job (horovodrun -np 2 --gloo, or a chief + 2 workers + 1 ps
cluster on localhost); the repeats alternate between configurations and the table reports the
median examples/s (all workers together) with the range. See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import procs
import table

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
WORKERS = 2
HOROVOD, PS = "horovod", "parameter_server"
BACKENDS = (HOROVOD, PS)
MODELS = ("small", "large")
# Steps per epoch, sized for a few seconds per timed epoch on 2 CPU cores. Horovod: per rank
# (global batch 128); parameter server: all workers together (batch 64 each), a multiple of 10.
STEPS = {(HOROVOD, "small"): 100, (HOROVOD, "large"): 20, (PS, "small"): 100, (PS, "large"): 40}
NOISE = ("I0000", "W0000", "E0000", "absl::InitializeLog", "rebuild TensorFlow", "instructions in",
         "cuda", "oneDNN")


@dataclasses.dataclass(frozen=True)
class Config:
    """One measured configuration. ``steps_per_execution`` None: the implementation's default."""

    backend: str
    impl: str
    model: str
    steps_per_execution: int | None = None

    @property
    def name(self) -> str:
        spe = "" if self.steps_per_execution is None else f" spe={self.steps_per_execution}"
        return f"{self.backend} {self.model} {self.impl}{spe}"


@dataclasses.dataclass(frozen=True)
class Plan:
    """How long to train each configuration and how often to repeat it."""

    repeats: int
    epochs: int
    steps_scale: float
    timeout: float

    def steps(self, config: Config) -> int:
        steps = STEPS[(config.backend, config.model)] * self.steps_scale
        return max(10, int(round(steps / 10)) * 10)


def configs_for(models: list[str]) -> list[Config]:
    configs = []
    for model in models:
        configs += [Config(HOROVOD, "baseline", model), Config(HOROVOD, "tfdist", model),
                    Config(PS, "baseline", model), Config(PS, "tfdist", model),
                    Config(PS, "tfdist", model, steps_per_execution=10)]
    return configs


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1", PYTHONUNBUFFERED="1")
    return env


def run_config(config: Config, plan: Plan) -> procs.RunResult:
    """Start one job for ``config`` and wait for it (or its deadline)."""
    script = HERE / f"{config.impl}_{'horovod' if config.backend == HOROVOD else 'ps'}.py"
    command = [PYTHON, str(script), "--model", config.model, "--steps", str(plan.steps(config)),
               "--epochs", str(plan.epochs)]
    if config.steps_per_execution is not None:
        command += ["--steps-per-execution", str(config.steps_per_execution)]
    env = child_env()
    if config.backend == HOROVOD:
        horovodrun = str(Path(PYTHON).parent / "horovodrun")
        command = [horovodrun, "-np", str(WORKERS), "-H", f"localhost:{WORKERS}", "--gloo", *command]
    elif config.impl == "tfdist":
        command = [PYTHON, "-m", "tfdist", "launch", "--workers", str(WORKERS), "--ps", "1", "--", *command]
    else:
        return procs.run_ps_cluster(command, env, plan.timeout, workers=WORKERS, ps=1)
    return procs.run(command, env, plan.timeout)


def parse_bench(output: str) -> dict[str, str] | None:
    """The fields of the ``BENCH k=v ...`` line, wherever a launcher prefixed it."""
    for line in output.splitlines():
        at = line.find("BENCH impl=")
        if at >= 0:
            return dict(field.split("=", 1) for field in line[at:].split()[1:] if "=" in field)
    return None


def error_tail(output: str, lines: int = procs.TAIL_LINES) -> str:
    useful = [line for line in output.splitlines() if line.strip() and not any(n in line for n in NOISE)]
    return "\n".join(useful[-lines:])


def measure(configs: list[Config], plan: Plan) -> list[dict]:
    """Run every configuration ``plan.repeats`` times, alternating; one record per run."""
    records = []
    total = len(configs) * plan.repeats
    for repeat in range(plan.repeats):
        order = configs if repeat % 2 == 0 else configs[::-1]  # cancels slow drift
        for config in order:
            result = run_config(config, plan)
            fields = parse_bench(result.output) if result.ok else None
            record = {**dataclasses.asdict(config), "repeat": repeat, "ok": fields is not None,
                      "wall_seconds": round(result.seconds, 1), "returncode": result.returncode,
                      "fields": fields or {}}
            if fields is None:
                record["error"] = (result.note + "\n" if result.note else "") + error_tail(result.output)
            records.append(record)
            done = f"{float(fields['examples_per_sec']):,.0f} ex/s" if fields else "FAILED"
            print(f"[{len(records)}/{total}] {config.name}: {done} ({result.seconds:.0f}s)",
                  file=sys.stderr, flush=True)
    return records


def _rates(records: list[dict], **match: object) -> tuple[list[float], int]:
    runs = [r for r in records if all(r[k] == v for k, v in match.items())]
    return [float(r["fields"]["examples_per_sec"]) for r in runs if r["ok"]], len(runs)


def report(records: list[dict], models: list[str]) -> str:
    """The three tables: tfdist vs baseline, PSS steps_per_execution, Horovod vs PSS."""
    params = {r["model"]: r["fields"]["params"] for r in records if r["ok"]}
    rows = []
    for backend in BACKENDS:
        for model in models:
            base, base_n = _rates(records, backend=backend, model=model, impl="baseline", steps_per_execution=None)
            ours, ours_n = _rates(records, backend=backend, model=model, impl="tfdist", steps_per_execution=None)
            rows.append([backend, model, f"{int(params[model]):,}" if model in params else "-", table.rate(base, base_n),
                         table.rate(ours, ours_n), table.ratio(ours, base)])
    parts = ["Examples/s, all workers together: median (min-max) over runs",
             table.render(["backend", "model", "params", "baseline ex/s", "tfdist ex/s", "tfdist/baseline"], rows)]

    defaults = {r["fields"].get("steps_per_execution") for r in records
                if r["ok"] and r["backend"] == PS and r["impl"] == "tfdist" and r["steps_per_execution"] is None}
    default = "/".join(sorted(defaults)) or "?"
    rows = []
    for model in models:
        one, one_n = _rates(records, backend=PS, model=model, impl="tfdist", steps_per_execution=None)
        ten, ten_n = _rates(records, backend=PS, model=model, impl="tfdist", steps_per_execution=10)
        rows.append([model, table.rate(one, one_n), table.rate(ten, ten_n), table.ratio(ten, one)])
    parts += ["", "tfdist ParameterServerStrategy, steps_per_execution",
              table.render(["model", f"default (spe={default}) ex/s", "spe=10 ex/s", "spe10/default"], rows)]

    rows = []
    for model in models:
        for impl in ("baseline", "tfdist"):
            hvd, hvd_n = _rates(records, backend=HOROVOD, model=model, impl=impl, steps_per_execution=None)
            pss, pss_n = _rates(records, backend=PS, model=model, impl=impl, steps_per_execution=None)
            rows.append([model, impl, table.rate(hvd, hvd_n), table.rate(pss, pss_n), table.ratio(hvd, pss)])
    parts += ["", f"Horovod ({WORKERS} ranks) vs ParameterServerStrategy ({WORKERS} workers + 1 ps)",
              table.render(["model", "impl", "horovod ex/s", "pss ex/s", "horovod/pss"], rows)]

    failures = [r for r in records if not r["ok"]]
    for r in failures:
        parts += ["", f"FAILED: {Config(r['backend'], r['impl'], r['model'], r['steps_per_execution']).name} "
                      f"(repeat {r['repeat']}):", r["error"]]
    return "\n".join(parts)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 run per config, shorter epochs (~3 min)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: small,large")
    parser.add_argument("--repeats", type=int, help="runs per configuration (default 3; --quick: 1)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per run before it is killed")
    parser.add_argument("--json", metavar="FILE", help="also save every run and the settings here")
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown or not args.models:
        parser.error(f"--models: unknown {unknown or 'empty list'}; choose from {','.join(MODELS)}")
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        plan = Plan(repeats=args.repeats or 1, epochs=1, steps_scale=0.5, timeout=args.timeout)
    else:
        plan = Plan(repeats=args.repeats or 3, epochs=2, steps_scale=1.0, timeout=args.timeout)
    configs = configs_for(args.models)
    print(f"tfdist benchmarks: {len(configs)} configurations x {plan.repeats} run(s), batch 64 per "
          f"worker, 1 warm-up epoch + {plan.epochs} timed", file=sys.stderr, flush=True)
    start, load_before = time.monotonic(), os.getloadavg()[0]
    records = measure(configs, plan)
    wall, load_after = time.monotonic() - start, os.getloadavg()[0]
    print(report(records, args.models))
    print(f"\nwall time {wall:.0f}s; 1-min load average {load_before:.1f} before, {load_after:.1f} after "
          f"({os.cpu_count()} CPUs: above that, other processes share the cores and the figures are noisy)",
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"plan": dataclasses.asdict(plan), "models": args.models, "wall_seconds": round(wall, 1),
                       "load_average": [load_before, load_after],
                       "steps": {f"{b}/{m}": plan.steps(Config(b, "baseline", m)) for b, m in STEPS},
                       "runs": records}, f, indent=2)
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
