"""Time to a target accuracy: Horovod (fp32 and fp16) vs parameter servers on the network lab.

    .venv/bin/python benchmarks/time_to_accuracy.py                   # 3 repeats, unshaped and 50 Mbit
    .venv/bin/python benchmarks/time_to_accuracy.py --quick           # 1 repeat, unshaped only
    .venv/bin/python benchmarks/time_to_accuracy.py --slow 50,10 --json tta.json
    .venv/bin/python benchmarks/time_to_accuracy.py --backends horovod,horovod_fp16
    .venv/bin/python benchmarks/time_to_accuracy.py --backends horovod,horovod_powersgd --repeats 1
    .venv/bin/python benchmarks/time_to_accuracy.py --backends multi_worker_mirrored,multi_worker_mirrored_powersgd

Asynchronous parameter-server updates can need more epochs than synchronous allreduce to reach the
same accuracy, so a backend faster per example can be slower to a target. This driver builds a lab
(hosts c, w1, w2, p1; needs root), and on each link trains examples/classifier.py's digits model with
``benchmarks/tta_job.py`` under three backends, launched from host c by the product:

* ``horovod``: ``tfdist launch --backend horovod --hosts w1:1,w2:1 --network-interface eth0`` (a rank
  on w1 and w2), ``make_strategy("horovod")``;
* ``horovod_fp16``: the same launch, ``make_strategy("horovod", compression="fp16")`` (gradients cast
  to float16 for the allreduce: half the bytes on the wire);
* ``parameter_server``: ``tfdist launch --hosts w1:1,w2:1,p1:1,c:1 --chief-host c --ps-hosts p1
  --workers 2 --ps 1`` (the chief on c, workers on w1 and w2, the ps on p1);
* ``horovod_powersgd`` (only when named in ``--backends``): the Horovod launch,
  ``make_strategy("horovod", compression="powersgd")`` (each weight matrix as two rank-4 factors, with
  error feedback), against fp32 Horovod's time to the target and final accuracy;
* ``multi_worker_mirrored`` and ``multi_worker_mirrored_powersgd`` (only when named): ``tfdist launch
  --backend multi_worker_mirrored --hosts w1:1,w2:1`` (a worker on w1 and w2, tf.distribute's
  collectives), plain and with ``compression="powersgd"``: the plan for a cluster without Horovod.

Each run stops at the first epoch whose validation accuracy reaches ``--target``, or after
``--max-epochs``; its job reports the strategy it really ran (``kind``, ``compression``), and a run
whose strategy is not the one asked for counts as failed. Backends rotate within each repeat (each
backend takes each place in the order once every three repeats). The tables give medians with
(min-max) ranges and the final validation accuracy (the stopping epoch's), then the PS/Horovod ratios
of time and of epochs to the target (the "epochs factor"), and whether fp16's final validation
accuracy equals fp32 Horovod's within ``ACCURACY_POINTS`` points (medians over the repeats).
``--json FILE`` writes every run with its per-epoch curve. The lab and any running job are stopped on
every exit (errors, Ctrl-C, SIGTERM).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_runner import LabRunner, measure_interruptibly, sigterm_as_interrupt  # noqa: E402
from table import FAILED, median, render  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
JOB = Path(__file__).resolve().parent / "tta_job.py"
HOSTS = ["c", "w1", "w2", "p1"]
BACKENDS = ("horovod", "horovod_fp16", "parameter_server")
#: Run only when named in --backends.
OPTIONAL_BACKENDS = ("horovod_powersgd", "multi_worker_mirrored", "multi_worker_mirrored_powersgd")
KNOWN = BACKENDS + OPTIONAL_BACKENDS
LABELS = {"horovod": "Horovod (2 ranks)", "horovod_fp16": "Horovod fp16 (2 ranks)",
          "horovod_powersgd": "Horovod PowerSGD (2 ranks)",
          "multi_worker_mirrored": "MultiWorkerMirrored (2 workers)",
          "multi_worker_mirrored_powersgd": "MultiWorkerMirrored PowerSGD (2 workers)",
          "parameter_server": "PS (chief + 2 workers + 1 ps)"}
_HOROVOD_LAUNCH = ["--backend", "horovod", "--hosts", "w1:1,w2:1", "--network-interface", "eth0"]
LAUNCH = {
    "horovod": _HOROVOD_LAUNCH,
    "horovod_fp16": _HOROVOD_LAUNCH,
    "horovod_powersgd": _HOROVOD_LAUNCH,
    "multi_worker_mirrored": ["--backend", "multi_worker_mirrored", "--hosts", "w1:1,w2:1", "--workers", "2"],
    "multi_worker_mirrored_powersgd": ["--backend", "multi_worker_mirrored", "--hosts", "w1:1,w2:1",
                                       "--workers", "2"],
    "parameter_server": ["--hosts", "w1:1,w2:1,p1:1,c:1", "--chief-host", "c", "--ps-hosts", "p1",
                         "--workers", "2", "--ps", "1"],
}
#: tta_job.py's options per backend, and the (kind, compression) its strategy must report
JOB_OPTIONS = {"horovod": ["--backend", "horovod"],
               "horovod_fp16": ["--backend", "horovod", "--compression", "fp16"],
               "horovod_powersgd": ["--backend", "horovod", "--compression", "powersgd"],
               "multi_worker_mirrored": ["--backend", "multi_worker_mirrored"],
               "multi_worker_mirrored_powersgd": ["--backend", "multi_worker_mirrored", "--compression", "powersgd"],
               "parameter_server": ["--backend", "parameter_server"]}
EXPECTED = {"horovod": ("horovod", "none"), "horovod_fp16": ("horovod", "fp16"),
            "horovod_powersgd": ("horovod", "powersgd"),
            "multi_worker_mirrored": ("multi_worker_mirrored", "none"),
            "multi_worker_mirrored_powersgd": ("multi_worker_mirrored", "powersgd"),
            "parameter_server": ("parameter_server", "none")}
ACCURACY_POINTS = 0.5  # fp16 keeps accuracy when its final val_accuracy is within this of fp32's


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="1 repeat, the unshaped link only, --max-epochs 15 (unless given)")
    parser.add_argument("--repeats", type=int, help="runs per backend and link (default 3, quick 1)")
    parser.add_argument("--max-epochs", type=int, help="stop there if the target is not reached (default 40, "
                        "quick 15)")
    parser.add_argument("--target", type=float, default=0.97, help="validation accuracy (default 0.97)")
    parser.add_argument("--slow", default="50",
                        help="slow link rates in Mbit/s, comma-separated, applied to every host's link "
                             "(default 50; '' for none)")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"comma-separated, from {','.join(BACKENDS)} (default all three)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run before it is killed")
    parser.add_argument("--json", metavar="FILE", help="write every run (with its curve) here")
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.max_epochs = args.max_epochs or (15 if args.quick else 40)
    if args.repeats < 1 or args.max_epochs < 1:
        parser.error("--repeats and --max-epochs must be at least 1")
    if not 0 < args.target <= 1:
        parser.error(f"--target {args.target}: give a validation accuracy between 0 and 1, e.g. 0.95")
    try:
        rates = [float(r) for r in args.slow.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--slow {args.slow!r}: give rates in Mbit/s, comma-separated, e.g. 50,10")
    args.links = [None] + ([] if args.quick else rates)
    chosen = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in chosen if b not in KNOWN]
    if unknown or not chosen:
        parser.error(f"--backends {args.backends!r}: give backends from {','.join(KNOWN)}, "
                     "comma-separated, e.g. horovod,horovod_fp16")
    args.backends = tuple(b for b in KNOWN if b in chosen)
    return args


def link_name(rate: float | None) -> str:
    return "unshaped" if rate is None else f"{rate:g} Mbit/s"


def job_env() -> dict[str, str]:
    """The launcher's environment: quiet TensorFlow on tf-keras, the venv first, no cluster variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMI_", "SLURM_")) and k != "TF_CONFIG"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


class Runner(LabRunner):
    """Starts one job at a time on host c and always stops it (``stop``)."""

    hosts = HOSTS

    def __init__(self, lab, workdir: Path, args: argparse.Namespace) -> None:
        super().__init__(lab)
        self.workdir, self.args = workdir, args

    def run(self, backend: str, link: float | None, repeat: int) -> dict:
        self.count += 1
        out = self.workdir / f"run{self.count}.json"
        log = self.workdir / f"run{self.count}.log"
        argv = [sys.executable, "-m", "tfdist", "launch", *LAUNCH[backend],
                "--ssh-port", str(self.lab.ssh_port), "--ssh-identity-file", str(self.lab.identity_file),
                "--grace", "2", "--", sys.executable, str(JOB), *JOB_OPTIONS[backend],
                "--target", str(self.args.target), "--max-epochs", str(self.args.max_epochs),
                "--out", str(out)]
        record = {"backend": backend, "link": link_name(link), "link_mbit": link, "repeat": repeat}
        started = time.monotonic()
        code = self.run_job("c", argv, log, job_env(), REPO, self.args.timeout)
        record["job_seconds"] = time.monotonic() - started
        record["exit_code"] = code
        record["left_on_hosts"] = self.leftovers()
        if code == 0 and out.exists():
            result = json.loads(out.read_text())
            ran = (result.pop("backend"), result.get("compression", "none"))
            record.update(result, strategy_kind=ran[0], ok=True)
            if ran != EXPECTED[backend]:  # the job's own strategy says it ran something else
                record.update(ok=False, error=f"the job ran kind={ran[0]} compression={ran[1]}, not "
                                              f"{EXPECTED[backend]}", tail=[])
        else:
            why = "timed out" if code is None else f"exit code {code}"
            tail = log.read_text(errors="replace").splitlines()[-25:]
            record.update(ok=False, error=why, tail=tail)
        return record



def describe(record: dict) -> str:
    if not record["ok"]:
        return f"{record['backend']:<16} {record['link']:<12} FAILED ({record['error']})"
    if record["reached"]:
        outcome = f"target in {record['epochs_to_target']} epochs, {record['seconds_to_target']:.1f} s"
    else:
        outcome = (f"target not reached in {record['max_epochs']} epochs "
                   f"(last {record['final_val_accuracy']:.3f})")
    curve = " ".join(f"{p['val_accuracy']:.3f}" for p in record["curve"])
    rate = record["examples_per_second"]
    rate_text = f"{rate:,.0f} ex/s" if rate else "- ex/s"
    left = f"; LEFT ON HOSTS: {record['left_on_hosts']}" if record["left_on_hosts"] else ""
    return (f"{record['backend']:<16} {record['link']:<12} {outcome}; {rate_text}; job "
            f"{record['job_seconds']:.0f} s; val_accuracy by epoch: {curve}{left}")


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    text = format(median(values), fmt)
    if len(values) > 1:
        text += f" ({format(min(values), fmt)}-{format(max(values), fmt)})"
    return text


def report(records: list[dict], links: list[float | None], target: float) -> tuple[str, list[dict]]:
    """The tables (one per link) and, per link, the ratios (also returned for the JSON). Only the
    backends that ran have rows; the summaries hold every backend's figures (None where it did not run)."""
    lines: list[str] = []
    summaries: list[dict] = []
    present = [b for b in KNOWN if any(r["backend"] == b for r in records)]
    for link in links:
        name = link_name(link)
        rows, figures = [], {}
        for backend in KNOWN:
            runs = [r for r in records if r["link"] == name and r["backend"] == backend]
            good = [r for r in runs if r["ok"]]
            hit = [r for r in good if r["reached"]]
            times = [r["seconds_to_target"] for r in hit]
            epochs = [float(r["epochs_to_target"]) for r in hit]
            rates = [r["examples_per_second"] for r in good if r["examples_per_second"]]
            firsts = [epoch_times(r)[0] for r in good if r["curve"]]
            laters = [later for r in good if r["curve"] and (later := epoch_times(r)[1]) is not None]
            finals = [r["final_val_accuracy"] for r in good if r.get("final_val_accuracy") is not None]
            figures[backend] = {"seconds": median(times), "epochs": median(epochs), "rate": median(rates),
                                "reached": len(hit), "runs": len(runs), "first_epoch_seconds": median(firsts),
                                "later_epoch_seconds": median(laters), "final_val_accuracy": median(finals)}
            if backend not in present:
                continue
            rows.append([LABELS[backend], spread(times, ".1f") if times else FAILED if not good else "-",
                         spread(epochs, "g") if epochs else "-",
                         f"{median(rates):,.0f}" if rates else "-", spread(firsts, ".1f"),
                         spread(laters, ".2f"), spread(finals, ".4f"), f"{len(hit)}/{len(runs)}"])
        lines += [f"\nLink: {name} (every host's link), target val_accuracy {target:g}",
                  render(["backend", "time to target s", "epochs to target", "examples/s", "1st epoch s",
                          "later epochs s/epoch", "final val_accuracy", "reached"], rows)]
        hvd, ps = figures["horovod"], figures["parameter_server"]
        summary = {"link": name, "link_mbit": link,
                   **{f"{b}_{k}": v for b in KNOWN for k, v in figures[b].items()},
                   "ps_over_horovod_time": _ratio(ps, hvd, "seconds"),
                   "epochs_factor": _ratio(ps, hvd, "epochs"),
                   "ps_over_horovod_rate": _ratio(ps, hvd, "rate")}
        fp16 = figures["horovod_fp16"]
        summary.update(fp16_over_horovod_time=_ratio(fp16, hvd, "seconds"),
                       fp16_over_horovod_rate=_ratio(fp16, hvd, "rate"),
                       **accuracy_check(fp16["final_val_accuracy"], hvd["final_val_accuracy"]))
        summaries.append(summary)
        if "parameter_server" in present and "horovod" in present:
            lines.append(f"PS/Horovod time to target {fmt(summary['ps_over_horovod_time'])}; epochs "
                         f"factor (PS epochs / Horovod epochs) {fmt(summary['epochs_factor'])}; PS/Horovod "
                         f"examples/s {fmt(summary['ps_over_horovod_rate'])}")
            lines.append(verdict(hvd, ps))
        if "horovod_fp16" in present and "horovod" in present:
            lines.append(fp16_line(summary, fp16, hvd))
        low_rank = figures["horovod_powersgd"]
        summary.update(powersgd_over_horovod_time=_ratio(low_rank, hvd, "seconds"),
                       powersgd_over_horovod_rate=_ratio(low_rank, hvd, "rate"),
                       powersgd_minus_fp32_points=None if low_rank["final_val_accuracy"] is None
                       or hvd["final_val_accuracy"] is None
                       else 100 * (low_rank["final_val_accuracy"] - hvd["final_val_accuracy"]))
        mirrored, mirrored_low_rank = figures["multi_worker_mirrored"], figures["multi_worker_mirrored_powersgd"]
        summary.update(mwms_powersgd_over_mwms_time=_ratio(mirrored_low_rank, mirrored, "seconds"),
                       mwms_powersgd_over_mwms_rate=_ratio(mirrored_low_rank, mirrored, "rate"))
        if "multi_worker_mirrored_powersgd" in present and "multi_worker_mirrored" in present:
            lines.append("MultiWorkerMirrored PowerSGD vs plain: time to target "
                         f"{fmt(summary['mwms_powersgd_over_mwms_time'])}, examples/s "
                         f"{fmt(summary['mwms_powersgd_over_mwms_rate'])}")
        if "horovod_powersgd" in present and "horovod" in present:
            points = summary["powersgd_minus_fp32_points"]
            lines.append(f"PowerSGD vs fp32 Horovod: time to target {fmt(summary['powersgd_over_horovod_time'])} "
                         f"(target <= 0.5x on 50 Mbit/s), examples/s {fmt(summary['powersgd_over_horovod_rate'])}, "
                         "final val_accuracy " + ("unknown" if points is None else f"{points:+.2f} points"))
    if len(links) > 1:  # epochs do not depend on the link's speed: pool them for a steadier factor
        pooled = {b: median([float(r["epochs_to_target"]) for r in records
                             if r["backend"] == b and r["ok"] and r["reached"]]) for b in BACKENDS}
        finals = {b: median([r["final_val_accuracy"] for r in records if r["backend"] == b and r["ok"]
                             and r.get("final_val_accuracy") is not None]) for b in BACKENDS}
        factor = _ratio({"epochs": pooled["parameter_server"]}, {"epochs": pooled["horovod"]}, "epochs")
        check = accuracy_check(finals["horovod_fp16"], finals["horovod"])
        summaries.append({"link": "all", "horovod_epochs": pooled["horovod"],
                          "parameter_server_epochs": pooled["parameter_server"], "epochs_factor": factor,
                          "horovod_fp16_epochs": pooled["horovod_fp16"],
                          **{f"{b}_final_val_accuracy": finals[b] for b in BACKENDS}, **check})
        lines.append(f"\nAll links together: epochs to target, median, Horovod {_g(pooled['horovod'])}, "
                     f"Horovod fp16 {_g(pooled['horovod_fp16'])}, PS {_g(pooled['parameter_server'])}; "
                     f"epochs factor {fmt(factor)}")
        if "horovod_fp16" in present and "horovod" in present:
            lines.append(fp16_line({**check}, {"final_val_accuracy": finals["horovod_fp16"]},
                                   {"final_val_accuracy": finals["horovod"]}, pooled=True))
    return "\n".join(lines), summaries


def accuracy_check(fp16: float | None, fp32: float | None) -> dict:
    """fp16's final validation accuracy against fp32 Horovod's: the difference in points and whether it
    is within ``ACCURACY_POINTS`` (None when either is unknown)."""
    if fp16 is None or fp32 is None:
        return {"fp16_minus_fp32_points": None, "fp16_accuracy_kept": None}
    points = 100 * (fp16 - fp32)
    return {"fp16_minus_fp32_points": points, "fp16_accuracy_kept": abs(points) <= ACCURACY_POINTS + 1e-9}


def fp16_line(summary: dict, fp16: dict, hvd: dict, pooled: bool = False) -> str:
    """The fp16 verdict: final validation accuracy against fp32 Horovod's (and, per link, the speed)."""
    kept = summary["fp16_accuracy_kept"]
    if kept is None:
        return "fp16 vs fp32 Horovod: final val_accuracy unknown (a backend failed)"
    points = summary["fp16_minus_fp32_points"]
    answer = "yes" if kept else f"NO (fp16 {'above' if points > 0 else 'below'} fp32)"
    text = (f"fp16 vs fp32 Horovod{' (every run)' if pooled else ''}: final val_accuracy median "
            f"{fp16['final_val_accuracy']:.4f} vs {hvd['final_val_accuracy']:.4f} "
            f"({points:+.2f} points); equal within {ACCURACY_POINTS:g} points: {answer}")
    if not pooled:
        text += (f"; fp16/fp32 time to target {fmt(summary['fp16_over_horovod_time'])}, examples/s "
                 f"{fmt(summary['fp16_over_horovod_rate'])}")
    return text


def _ratio(ps: dict, hvd: dict, key: str) -> float | None:
    return ps[key] / hvd[key] if ps[key] and hvd[key] else None


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def epoch_times(record: dict) -> tuple[float, float | None]:
    """(first epoch's seconds, mean seconds of each later epoch): start-up and tracing apart."""
    seconds = [point["seconds"] for point in record["curve"]]
    later = (seconds[-1] - seconds[0]) / (len(seconds) - 1) if len(seconds) > 1 else None
    return seconds[0], later


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def verdict(hvd: dict, ps: dict) -> str:
    names = {"horovod": "Horovod", "parameter_server": "the parameter-server job"}
    if hvd["rate"] and ps["rate"]:
        faster = "horovod" if hvd["rate"] >= ps["rate"] else "parameter_server"
        per_example = f"{names[faster]} is faster per example"
    else:
        faster, per_example = None, "per-example speed unknown (a backend failed)"
    if hvd["seconds"] is not None and ps["seconds"] is not None:
        sooner = "horovod" if hvd["seconds"] <= ps["seconds"] else "parameter_server"
        to_target = f"{names[sooner]} reaches the target sooner"
    elif hvd["seconds"] is not None or ps["seconds"] is not None:
        sooner = "horovod" if hvd["seconds"] is not None else "parameter_server"
        to_target = f"only {names[sooner]} reached the target"
    else:
        sooner, to_target = None, "neither reached the target"
    mismatch = faster is not None and sooner is not None and faster != sooner
    flag = " (the faster one per example is NOT the sooner to the target)" if mismatch else ""
    return f"=> {per_example[:1].upper()}{per_example[1:]}; {to_target}{flag}."


def measure(args: argparse.Namespace, records: list[dict]) -> None:
    """Every run, appended to ``records`` as it ends; the job and the lab are stopped however it ends."""
    from tfdist.testing.netlab import Lab

    with tempfile.TemporaryDirectory(prefix="tfdist-tta-") as workdir, Lab(HOSTS) as lab:
        runner = Runner(lab, Path(workdir), args)
        try:
            for link in args.links:
                for host in HOSTS:
                    lab.shape(host, link)
                for repeat in range(args.repeats):
                    for backend in rotated(args.backends, repeat):
                        record = runner.run(backend, link, repeat)
                        records.append(record)
                        print(describe(record), flush=True)
                        for line in record.get("tail", []):
                            print(f"    | {line}", flush=True)
        finally:
            runner.stop()


def rotated(backends: tuple[str, ...], repeat: int) -> tuple[str, ...]:
    """The order of repeat ``repeat``: each backend first in turn."""
    turn = repeat % len(backends)
    return backends[turn:] + backends[:turn]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sigterm_as_interrupt()
    print(f"time_to_accuracy: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}, "
          f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}; repeats {args.repeats}, links "
          f"{', '.join(link_name(rate) for rate in args.links)}, backends {','.join(args.backends)}, "
          f"target {args.target:g}, "
          f"max epochs {args.max_epochs}, batch 32 per worker", flush=True)
    start, load_before = time.monotonic(), os.getloadavg()[0]
    records: list[dict] = []
    interrupted = measure_interruptibly(measure, args, records)
    wall, load_after = time.monotonic() - start, os.getloadavg()[0]
    text, summaries = report(records, args.links, args.target)
    print(text)
    print(f"\n{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}; wall time {wall / 60:.1f} min; "
          f"nproc {os.cpu_count()}; 1-min load {load_before:.2f} before, {load_after:.2f} after")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "target": args.target, "max_epochs": args.max_epochs, "repeats": args.repeats, "batch_size": 32,
            "backends": list(args.backends),
            "links": [link_name(rate) for rate in args.links], "wall_seconds": wall, "nproc": os.cpu_count(),
            "load_before": load_before, "load_after": load_after, "summaries": summaries, "runs": records,
        }, indent=1))
    if interrupted:
        return 130
    return 0 if records and all(r["ok"] and not r["left_on_hosts"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
