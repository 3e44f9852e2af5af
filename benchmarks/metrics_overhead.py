"""What recording every figure costs: the small MLP of `make bench` under Horovod, with and without.

    .venv/bin/python benchmarks/metrics_overhead.py              # 6 repeats of each, alternating
    .venv/bin/python benchmarks/metrics_overhead.py --repeats 2  # a quick look

"with" records what examples/classifier.py records: ``strategy.metrics`` (Throughput, WorkerMetrics),
``TensorBoardRun`` with a target, and ``SystemMetrics`` sampling every second; "without" only times the
epochs. Both run ``benchmarks/tfdist_horovod.py --model small`` under ``horovodrun -np 2 --gloo``; the
repeats alternate (without, with, with, without, ...) so slow drift of the machine cancels, and the
table prints the median examples/s and rank 0's CPU time per step (all its threads, the sampler's
included; less disturbed by other load than wall time) of each, their ratios, and the machine's load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import procs
from compare import HERE, PYTHON, child_env, parse_bench

MODES = ("none", "all")


def run(mode: str, steps: int, epochs: int, timeout: float) -> tuple[float, float] | None:
    """One job: (examples/s, rank 0's CPU ms per step) over the timed epochs, or None when it failed."""
    horovodrun = str(Path(PYTHON).parent / "horovodrun")
    command = [horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", PYTHON, str(HERE / "tfdist_horovod.py"),
               "--model", "small", "--steps", str(steps), "--epochs", str(epochs), "--metrics", mode]
    result = procs.run(command, child_env(), timeout)
    fields = parse_bench(result.output) if result.ok else None
    if fields is None:
        print(f"{mode}: FAILED\n{result.output[-2000:]}", file=sys.stderr)
        return None
    return float(fields["examples_per_sec"]), float(fields["cpu_ms_per_step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--steps", type=int, default=100, help="steps per epoch per rank (default: 100)")
    parser.add_argument("--epochs", type=int, default=4, help="timed epochs after one warm-up epoch")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()

    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        for mode in (MODES if repeat % 2 == 0 else MODES[::-1]):
            measured = run(mode, args.steps, args.epochs, args.timeout)
            if measured is not None:
                rates[mode].append(measured[0])
                cpu[mode].append(measured[1])
            shown = "FAILED" if measured is None else f"{measured[0]:,.0f} ex/s, {measured[1]:.2f} CPU ms/step"
            print(f"[{repeat + 1}/{args.repeats}] {mode}: {shown}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(f"\nsmall MLP, horovod 2 ranks, {args.steps} steps x {args.epochs} timed epochs, "
          f"{args.repeats} repeats alternating; load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(f"{'metrics':<10} {'runs':>4} {'median ex/s':>12} {'range':>22} {'CPU ms/step':>12} {'range':>16}")
    for mode in MODES:
        values, cpus = rates[mode], cpu[mode]
        if values:
            print(f"{mode:<10} {len(values):>4} {statistics.median(values):>12,.0f} "
                  f"{min(values):>10,.0f} - {max(values):<9,.0f} {statistics.median(cpus):>12.2f} "
                  f"{min(cpus):>7.2f} - {max(cpus):<6.2f}")
    if rates["none"] and rates["all"]:
        ratio = statistics.median(rates["all"]) / statistics.median(rates["none"])
        cpu_ratio = statistics.median(cpu["all"]) / statistics.median(cpu["none"])
        print(f"\nexamples/s with / without: {ratio:.3f} (overhead {100 * (1 - ratio):+.1f} %)")
        print(f"rank 0's CPU per step with / without: {cpu_ratio:.3f} (overhead {100 * (cpu_ratio - 1):+.1f} %)")


if __name__ == "__main__":
    main()
