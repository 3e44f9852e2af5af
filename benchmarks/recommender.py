"""examples/recommender.py on the network lab: examples/s with 1 and 2 ps, unshaped and at 200 Mbit/s,
beside the advisor's prediction; and the peak memory of every ps task with 1 and 2 shards.

    sudo .venv/bin/python benchmarks/recommender.py                  # 2 repeats, 10 runs: 5-9 min on 2 cores
    sudo .venv/bin/python benchmarks/recommender.py --quick          # 1 repeat, no 2-ps-unsharded run
    sudo .venv/bin/python benchmarks/recommender.py --items 1M --embedding-dim 128 --json rec.json

Needs root: a lab (tfdist.testing.netlab) of hosts c (the launcher and the chief), w1 and w2 (the
workers), p1 and p2 (the ps tasks). Every run is one `tfdist launch --hosts ... --chief-host c
--ps-hosts ...` of the unchanged example, as a user would start it, with a large item table
(default 500k x 64: 32M parameters, 128 MB, and as much again in Adagrad's accumulators):

* ``ps1``: 1 ps task holding every variable whole (the table is one shard);
* ``ps2``: 2 ps tasks, ``--shards 2`` (every variable split over both, as the advisor assumes);
* ``ps2-whole`` (memory only, unshaped, once per repeat): 2 ps tasks without ``--shards``: whole
  variables placed round-robin, so one ps holds the whole table.

Runs alternate between configurations and links (forward on even repeats, reversed on odd). The
examples/s are the chief's RESULT line (``Throughput``: both workers, epochs after the first). While a
run lasts, the driver reads ``VmHWM`` (the peak resident set) from ``/proc/PID/status`` of the ps task
on each ps host (the lab's hosts share this machine's /proc) and keeps the last value before it exits.
The prediction is the advisor's own (``tfdist.advise.manual_inputs`` and ``predict_all``: the
parameter-server figure for P ps) from the model's parameter count and its two tables (``tfdist advise
--embedding USERSxDIM --embedding ITEMSxDIM``: a step moves one batch of rows of each), the compute time
of a step (the example under ``--backend single`` on w1, measured first) and the link (measured
unshaped: one TCP transfer w1 -> w2; 200 Mbit/s as shaped). A second column gives the advisor told
nothing of the tables (every parameter pulled and pushed each step). See benchmarks/README.md, "The
recommender on the lab".
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_runner import LabRunner, measure_interruptibly  # noqa: E402
from table import FAILED, median, rate, ratio, render  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "recommender.py"
HOSTS = ["c", "w1", "w2", "p1", "p2"]
WORKERS, BATCH = 2, 256  # the example's default batch per worker
#: name -> (ps tasks, --shards or None)
CONFIGS = {"ps1": (1, None), "ps2": (2, 2), "ps2-whole": (2, None)}
MEMORY_ONLY = ("ps2-whole",)  # run unshaped only
RATES: tuple[float | None, ...] = (None, 200.0)  # Mbit/s; None: unshaped
POLL_SECONDS = 0.25
#: the chief's result line, bare or behind the launcher's prefix (``[chief:0]``, ``[chief:0@c]`` over ssh)
RESULT = re.compile(r"^(?:\[chief:0(?:@[\w.-]+)?\]\s*)?RESULT (.*)$", flags=re.MULTILINE)
NOISE = ("I0000", "W0000", "E0000", "absl::InitializeLog", "rebuild TensorFlow", "instructions in", "oneDNN")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def link_name(rate_mbit: float | None) -> str:
    return "unshaped" if rate_mbit is None else f"{rate_mbit:g} Mbit/s"


# --- pure logic (tests/benchmarks/test_recommender_bench.py) -------------------------------------------
def result_fields(output: str) -> dict[str, str] | None:
    """The ``k=v`` fields of the chief's one RESULT line in a launcher's output (None without one)."""
    lines = RESULT.findall(output)
    if len(lines) != 1:
        return None
    return dict(field.split("=", 1) for field in lines[0].split() if "=" in field)


def peak_kib(status: str, field: str = "VmHWM") -> int | None:
    """``VmHWM`` (the peak resident set; ``field="VmRSS"``: the current one) of a ``/proc/PID/status``
    text, in KiB; None when absent (a zombie)."""
    match = re.search(rf"^{field}:\s+(\d+)\s+kB$", status, flags=re.MULTILINE)
    return int(match.group(1)) if match else None


def schedule(configs: Sequence[str], rates: Sequence[float | None], repeats: int) -> list[tuple[str, Any, int]]:
    """``(config, rate, repeat)`` for every run: each repeat goes through every (rate, config) pair,
    forward on even repeats and reversed on odd; memory-only configs run unshaped only."""
    pairs = [(config, rate_mbit) for rate_mbit in rates for config in configs
             if rate_mbit is None or config not in MEMORY_ONLY]
    runs = []
    for repeat in range(repeats):
        for config, rate_mbit in (pairs if repeat % 2 == 0 else pairs[::-1]):
            runs.append((config, rate_mbit, repeat))
    return runs


def tables(users: int, items: int, dim: int) -> tuple:
    """The example's two tables as the advisor takes them (``--embedding``): one id of each per example."""
    from tfdist.advise.model_inputs import Embedding

    return Embedding(users, dim, 1), Embedding(items, dim, 1)


def predict(params: int, ps: int, step_ms: float, rate_bytes: float, latency_ms: float,
            embeddings: Sequence[Any] = ()) -> float:
    """The advisor's parameter-server examples/s for ``ps`` ps tasks (the public functions
    `tfdist advise` prints from; its defaults for the fixed costs)."""
    from tfdist.advise import manual_inputs, predict_all

    cluster, workload = manual_inputs(workers=WORKERS, bandwidths=(rate_bytes,), params=params, batch_size=BATCH,
                                      step_ms=step_ms, ps=ps, latency_ms=latency_ms, embeddings=embeddings)
    return predict_all(cluster, workload)["parameter_server"].examples_per_second


def _mb(kib_values: Sequence[float]) -> str:
    if not kib_values:
        return "-"
    text = f"{median(kib_values) / 1024:,.0f}"
    if len(kib_values) > 1:
        text += f" ({min(kib_values) / 1024:,.0f}-{max(kib_values) / 1024:,.0f})"
    return text


def _loads(records: Sequence[dict]) -> str:
    loads = [r["load"] for r in records]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"


def report(records: Sequence[dict], settings: dict) -> str:
    """The throughput table (per link and ps config, the ratio 2 ps / 1 ps beside the measured/predicted
    ratios and the load) and the memory table (per config, each ps's peak resident set)."""
    ok = [r for r in records if r["ok"]]
    repeats = settings["repeats"]

    def rates_of(config: str, rate_mbit: float | None) -> list[float]:
        return [r["examples_per_second"] for r in ok if (r["config"], r["rate_mbit"]) == (config, rate_mbit)]

    rows = []
    for rate_mbit in settings["rates"]:
        for config in (c for c in settings["configs"] if c not in MEMORY_ONLY):
            runs = [r for r in records if (r["config"], r["rate_mbit"]) == (config, rate_mbit)]
            done = rates_of(config, rate_mbit)
            ps, shards = CONFIGS[config]
            advised = next((r["predicted"] for r in runs if r.get("predicted")), None)
            dense = next((r["predicted_dense"] for r in runs if r.get("predicted_dense")), None)
            measured = median(done)
            rows.append([link_name(rate_mbit), config, str(ps), str(shards or 1), rate(done, len(runs) or repeats),
                         ratio(done, rates_of("ps1", rate_mbit)) if config != "ps1" else "1.00x",
                         f"{advised:,.0f}" if advised else "-",
                         f"{measured / advised:.2f}x" if advised and measured else "-",
                         f"{dense:,.1f}" if dense else "-",
                         f"{measured / dense:,.0f}x" if dense and measured else "-", _loads(runs)])
    headers = ["link", "config", "ps", "shards", "examples/s", "vs ps1", "advisor (--embedding)", "measured/advisor",
               "without --embedding", "measured/without", "1-min load"]
    parts = [f"examples/s, both workers (batch {BATCH} each), median (min-max) over repeats; item table "
             f"{settings['items']:,} x {settings['embedding_dim']} ({settings['table_mb']:,.0f} MiB float32), "
             f"{settings.get('params') or 0:,} parameters",
             render(headers, rows), ""]
    memory_rows = []
    for config in settings["configs"]:
        ps, shards = CONFIGS[config]
        runs = [r for r in ok if r["config"] == config]
        cells = [config, str(ps), str(shards or 1)]
        for key in ("peak_kib", "last_rss_kib"):
            for index in range(2):
                name = f"ps:{index}"
                cells.append(_mb([r[key][name] for r in runs if r.get(key, {}).get(name)]) if index < ps else "-")
        cells.append(_mb([max(r["peak_kib"].values()) for r in runs if r["peak_kib"]]))
        cells.append(str(len(runs)))
        memory_rows.append(cells)
    parts += ["ps memory, MiB, median (min-max) over the config's runs (every link): the peak resident set "
              "(VmHWM) of each ps task, and its resident set at the last poll before it exited (after training)",
              render(["config", "ps", "shards", "ps:0 peak", "ps:1 peak", "ps:0 at end", "ps:1 at end",
                      "largest peak", "runs"], memory_rows)]
    failed = [r for r in records if not r["ok"]]
    for r in failed:
        parts.append(f"  {FAILED}: {r['config']} {link_name(r['rate_mbit'])} repeat {r['repeat']}: {r['error']}")
        parts += [f"    {line}" for line in r.get("tail", [])[-8:]]
    left = [r for r in records if r.get("left_on_hosts")]
    for r in left:
        parts.append(f"  LEFT ON HOSTS after {r['config']} {link_name(r['rate_mbit'])}: {r['left_on_hosts']}")
    compute = settings.get("compute")
    if compute:
        parts.append("")
        parts.append(f"compute per step (the example under --backend single on w1, unshaped, batch {BATCH}): "
                     f"{compute['step_ms']:.1f} ms; unshaped link {settings['link_rate_mbit']:,.0f} Mbit/s "
                     f"(one TCP transfer w1->w2), latency {settings['latency_ms']:.3f} ms; the advisor's default "
                     "fixed cost per parameter-server step (not calibrated here)")
    return "\n".join(parts)


# --- the lab -----------------------------------------------------------------------------------------
class PeakWatcher:
    """Polls ``/proc/PID/status`` of the example's processes on the ps hosts while a run lasts; ``peaks``:
    the last ``VmHWM`` read per ps task (``ps:0`` on p1, ``ps:1`` on p2), ``last``: the last ``VmRSS`` (what
    it held once training was over: the variables, their slots and the server), both in KiB."""

    def __init__(self, lab, hosts: Sequence[str]) -> None:
        self.lab, self.hosts = lab, list(hosts)
        self.peaks: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PeakWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for index, host in enumerate(self.hosts):
                try:
                    pids = self.lab.pids(host)
                except Exception:  # noqa: BLE001  (a host between runs; the next poll reads it again)
                    continue
                for pid in pids:
                    try:
                        if b"recommender.py" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                            continue
                        status = Path(f"/proc/{pid}/status").read_text()
                    except OSError:
                        continue
                    kib, now = peak_kib(status), peak_kib(status, "VmRSS")
                    if kib:
                        name = f"ps:{index}"
                        self.peaks[name] = max(self.peaks.get(name, 0), kib)
                        self.last[name] = now or 0
            self._stop.wait(POLL_SECONDS)


class Runner(LabRunner):
    """One launch of the example at a time, from host c; always stopped, nothing left behind."""

    hosts = HOSTS

    def __init__(self, lab, workdir: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
        super().__init__(lab)
        self.workdir, self.args, self.env = workdir, args, env

    def example_args(self) -> list[str]:
        return ["--items", str(self.args.items), "--embedding-dim", str(self.args.embedding_dim),
                "--epochs", str(self.args.epochs)]

    def launch_argv(self, config: str) -> list[str]:
        ps, shards = CONFIGS[config]
        ps_hosts = [f"p{i + 1}" for i in range(ps)]
        hosts = ",".join(["w1:1", "w2:1", *(f"{h}:1" for h in ps_hosts), "c:1"])
        return [sys.executable, "-m", "tfdist", "launch", "--hosts", hosts, "--chief-host", "c",
                "--ps-hosts", ",".join(ps_hosts), "--workers", str(WORKERS), "--ps", str(ps),
                "--ssh-port", str(self.lab.ssh_port), "--ssh-identity-file", str(self.lab.identity_file),
                "--grace", "2", "--", sys.executable, str(EXAMPLE), "--backend", "parameter_server",
                *(["--shards", str(shards)] if shards else []), *self.example_args()]

    def _run(self, argv: list[str], host: str,
             watch: Sequence[str]) -> tuple[int | None, str, dict[str, dict[str, int]]]:
        self.count += 1
        log_path = self.workdir / f"run{self.count}.log"
        watcher = PeakWatcher(self.lab, watch)
        code = self.run_job(host, argv, log_path, self.env, REPO, self.args.timeout, during=watcher)
        return code, log_path.read_text(errors="replace"), {"peak": dict(watcher.peaks), "last": dict(watcher.last)}

    def compute_step_ms(self) -> dict:
        """The example's own step time as one process on w1 (no distribution), unshaped."""
        argv = [sys.executable, str(EXAMPLE), "--backend", "single", *self.example_args()]
        code, output, _ = self._run(argv, "w1", [])
        fields = result_fields(output)
        if code != 0 or fields is None:
            raise RuntimeError(f"the compute timing on w1 failed ({code}): {_tail(output)}")
        rate_value = float(fields["examples_per_second"])
        return {"step_ms": 1000 * BATCH / rate_value, "examples_per_second": rate_value,
                "params": int(fields["params"])}

    def run(self, config: str, rate_mbit: float | None, repeat: int) -> dict:
        record: dict[str, Any] = {"config": config, "rate_mbit": rate_mbit, "repeat": repeat,
                                  "load": os.getloadavg()[0]}
        ps, _ = CONFIGS[config]
        started = time.monotonic()
        code, output, memory = self._run(self.launch_argv(config), "c", [f"p{i + 1}" for i in range(ps)])
        record.update(seconds=time.monotonic() - started, exit_code=code, peak_kib=memory["peak"],
                      last_rss_kib=memory["last"], left_on_hosts=self.leftovers())
        fields = result_fields(output)
        if code == 0 and fields is not None:
            record.update(ok=True, examples_per_second=float(fields["examples_per_second"]),
                          params=int(fields["params"]), table_shards=int(fields["table_shards"]),
                          test_auc=float(fields["test_auc"]), result=fields)
        else:
            error = "timed out" if code is None else f"exit code {code}"
            record.update(ok=False, error=error + ("" if code else ", no RESULT line from the chief"),
                          tail=_tail(output).splitlines())
        return record


def _tail(output: str, lines: int = 25) -> str:
    useful = [line for line in output.splitlines() if line.strip() and not any(n in line for n in NOISE)]
    return "\n".join(useful[-lines:])


def shape_all(lab, rate_mbit: float | None) -> None:
    for host in HOSTS:
        lab.shape(host, rate_mbit)


def measure(lab, runner: Runner, args: argparse.Namespace, records: list[dict], settings: dict) -> None:
    import network  # the lab helpers of the network benchmark: link rate and latency

    settings["link_rate_mbit"] = network.link_rate_unlimited(lab, megabytes=200)
    settings["latency_ms"] = network.latency_ms(lab)
    log(f"unshaped link {settings['link_rate_mbit']:,.0f} Mbit/s, latency {settings['latency_ms']:.3f} ms")
    settings["compute"] = runner.compute_step_ms()
    settings["params"] = settings["compute"]["params"]
    log(f"compute: {settings['compute']['step_ms']:.1f} ms per step of {BATCH} on w1 alone")
    runs = schedule(args.configs, args.rates, args.repeats)
    for number, (config, rate_mbit, repeat) in enumerate(runs, 1):
        shape_all(lab, rate_mbit)
        record = runner.run(config, rate_mbit, repeat)
        ps, _ = CONFIGS[config]
        link_bytes = (settings["link_rate_mbit"] if rate_mbit is None else rate_mbit) * 1e6 / 8
        step_ms, params = settings["compute"]["step_ms"], settings["params"]
        record["predicted"] = predict(params, ps, step_ms, link_bytes, settings["latency_ms"],
                                      tables(args.users, args.items, args.embedding_dim))
        record["predicted_dense"] = predict(params, ps, step_ms, link_bytes, settings["latency_ms"])
        records.append(record)
        peaks = ", ".join(f"{k} {v / 1024:,.0f} MB" for k, v in sorted(record["peak_kib"].items()))
        outcome = (f"{record['examples_per_second']:,.0f} ex/s" if record["ok"] else f"FAILED ({record['error']})")
        log(f"run {number}/{len(runs)} {config} {link_name(rate_mbit)}: {outcome}; peak {peaks or '-'}; "
            f"{record['seconds']:.0f} s; load {record['load']:.2f}")
    shape_all(lab, None)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 repeat, without the ps2-whole memory run")
    parser.add_argument("--repeats", type=int, help="runs per configuration and link (default 2; --quick 1)")
    parser.add_argument("--configs", help=f"comma-separated, from {','.join(CONFIGS)} (default all; --quick ps1,ps2)")
    parser.add_argument("--items", default="500k", help="rows of the item table (default 500k)")
    parser.add_argument("--embedding-dim", type=int, default=64, help="its width (default 64)")
    parser.add_argument("--users", type=int, default=1000, help="the example's default user count (for the "
                                                                "advisor's --embedding); not passed on")
    parser.add_argument("--epochs", type=int, default=2, help="per run; examples/s from the epochs after the first")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run before it is stopped")
    parser.add_argument("--json", metavar="FILE", help="also write every run and the settings here")
    args = parser.parse_args(argv)
    from tfdist.advise import AdviseError, parse_count

    try:
        args.items = parse_count(args.items, field="--items")
    except AdviseError as exc:
        parser.error(str(exc))
    args.repeats = args.repeats or (1 if args.quick else 2)
    chosen = [c.strip() for c in (args.configs or ("ps1,ps2" if args.quick else ",".join(CONFIGS))).split(",")
              if c.strip()]
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown or not chosen or "ps1" not in chosen:
        parser.error(f"--configs {args.configs!r}: give configurations from {','.join(CONFIGS)}, with ps1 "
                     "(the ratios are against it); fix: e.g. --configs ps1,ps2")
    args.configs = [c for c in CONFIGS if c in chosen]
    for name in ("repeats", "embedding_dim", "users", "epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1; fix: pass e.g. 2")
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first epoch's tracing is left out); fix: pass 2")
    args.rates = list(RATES)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tfdist.testing.netlab import Lab
    import network

    def terminate(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    started, wall_start, load_before = datetime.datetime.now(datetime.timezone.utc), time.monotonic(), os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="tfdist-bench-recommender-", dir="/tmp"))
    settings: dict[str, Any] = {"configs": args.configs, "rates": args.rates, "repeats": args.repeats,
                                "items": args.items, "embedding_dim": args.embedding_dim, "epochs": args.epochs,
                                "table_mb": args.items * args.embedding_dim * 4 / 2**20}
    records: list[dict] = []
    log(f"recommender benchmark: {args.configs}, {len(schedule(args.configs, args.rates, args.repeats))} runs, "
        f"table {args.items:,} x {args.embedding_dim}; load {load_before[0]:.2f}")
    failure = None
    with Lab(HOSTS) as lab:
        runner = Runner(lab, workdir, args, network.child_env())
        try:
            interrupted = measure_interruptibly(measure, lab, runner, args, records, settings)
        except RuntimeError as exc:
            interrupted, failure = False, str(exc)
        finally:
            runner.stop()
    wall, load_after = time.monotonic() - wall_start, os.getloadavg()
    print(report(records, settings))
    if failure:
        print(f"\nFAILED: {failure}")
    print(f"\n{started:%Y-%m-%d %H:%M} UTC; wall time {wall / 60:.1f} min; nproc {os.cpu_count()}; load average "
          f"(1, 5, 15 min) {', '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{', '.join(f'{x:.2f}' for x in load_after)} after (above nproc: other processes shared the cores)",
          flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": settings, "started": started.isoformat(),
                                               "wall_seconds": round(wall, 1), "load_average": [load_before, load_after],
                                               "runs": records, "failure": failure}, indent=2, default=str))
    ok = not interrupted and not failure and records and all(r["ok"] and not r["left_on_hosts"] for r in records)
    if ok:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"the runs' logs: {workdir}", file=sys.stderr, flush=True)
    return 0 if ok else (130 if interrupted else 1)


if __name__ == "__main__":
    raise SystemExit(main())
