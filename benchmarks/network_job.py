"""The training script every task of the network benchmark runs (benchmarks/network.py drives it).

    tfdist launch --backend horovod --hosts w1:1,w2:1 ... -- python benchmarks/network_job.py \\
        --backend horovod --model small --control /tmp/DIR
    tfdist launch --hosts w1:1,w2:1,p1:1,c:1 --chief-host c --ps-hosts p1 --workers 2 --ps 1 ... -- \\
        python benchmarks/network_job.py --backend parameter_server --ps 1 --model small --control /tmp/DIR
    python benchmarks/network_job.py --backend single --model small --seconds 3 --result FILE

A long-lived job: after building the model it waits for command files ``cmd-<seq>.json`` in the
control directory (every lab host sees /tmp) and runs one phase per command: ``{"steps": N}`` trains
one epoch of N steps (Horovod: per rank, 2 x 64 examples a step; parameter server: all workers
together, 64 a step), timed from the epoch's start to its end by epoch-level hooks (batch hooks are
refused under ParameterServerStrategy), and rank 0 / the chief writes ``result-<seq>.json``
(atomic rename); ``{"quit": true}`` ends the job. Both Horovod ranks read the same command, so
they run the same steps. The first phase carries the tracing and Horovod's broadcast (once per
job: the same BroadcastInitialState is passed to every fit), so the driver sends a short warm-up
first. Under ParameterServerStrategy only the chief runs this loop: the workers and ps tasks serve
inside make_strategy until the chief is done.

``--backend single``: no distribution, no control directory: time ``fit`` calls of a few steps for
``--seconds`` and write the mean step time (the compute time the advisor is given).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import tfdist  # before tensorflow

import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload  # noqa: E402

from tfdist.callbacks import BroadcastInitialState  # noqa: E402

POLL_SECONDS = 0.05
DATA_EXAMPLES = 4096  # per job: repeated as long as the phase asks


class PhaseTimer(tf.keras.callbacks.Callback):
    """Wall and CPU time of the one epoch of a ``fit``, from its start to its end (epoch-end work,
    the metric allreduce or the coordinator's join, included)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = self.cpu_seconds = 0.0
        self.steps: int | None = None
        self._start = self._cpu = 0.0

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self.steps = (self.params or {}).get("steps")
        self._start, self._cpu = time.perf_counter(), time.process_time()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        self.seconds = time.perf_counter() - self._start
        self.cpu_seconds = time.process_time() - self._cpu


def write_json(path: Path, record: dict) -> None:
    """Write ``record`` to ``path`` atomically (the driver polls for it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def await_command(control: Path, seq: int) -> dict:
    path = control / f"cmd-{seq}.json"
    while True:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            time.sleep(POLL_SECONDS)


def serve_phases(args: argparse.Namespace) -> None:
    """The long-lived job: Horovod ranks or the parameter-server chief."""
    options = {"shards": args.ps} if args.backend == "parameter_server" and args.ps > 1 else {}
    strategy = tfdist.make_strategy(args.backend, **options)  # ps and workers serve here until the end
    with strategy.scope():
        model = workload.build_model(args.model)
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(workload.LEARNING_RATE)),
                      loss=workload.loss())
    x, y = workload.make_data(DATA_EXAMPLES)
    horovod = args.backend == "horovod"
    data = tf.data.Dataset.from_tensor_slices((x, y)) if horovod else None
    extra = [BroadcastInitialState()] if horovod else []  # one broadcast per job, not per phase
    per_step = args.batch_size * (strategy.size if horovod else 1)
    control = Path(args.control)
    seq = 1
    while True:
        command = await_command(control, seq)
        if command.get("quit"):
            break
        steps = int(command["steps"])
        timer = PhaseTimer()
        if horovod:
            strategy.fit(model, data, batch_size=args.batch_size, steps_per_epoch=steps, epochs=1,
                         callbacks=[*extra, timer], verbose=0)
        else:
            strategy.fit(model, x, y, batch_size=args.batch_size, steps_per_epoch=steps, epochs=1,
                         callbacks=[timer], verbose=0)
        if strategy.is_chief:
            ran = timer.steps or steps
            write_json(control / f"result-{seq}.json", {
                "seq": seq, "backend": args.backend, "model": args.model, "ps": args.ps,
                "params": model.count_params(), "steps": ran, "seconds": timer.seconds,
                "step_ms": 1000 * timer.seconds / ran, "examples_per_second": ran * per_step / timer.seconds,
                "cpu_ms_per_step": 1000 * timer.cpu_seconds / ran, "workers": strategy.num_workers,
                "tag": command.get("tag")})
        seq += 1


def time_compute(args: argparse.Namespace) -> None:
    """One process, no distribution: the mean step time of ``fit`` over about ``--seconds``."""
    model = workload.build_model(args.model)
    model.compile(optimizer=tf.keras.optimizers.SGD(workload.LEARNING_RATE), loss=workload.loss())
    x, y = workload.make_data(DATA_EXAMPLES)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size).repeat()
    chunk = 5
    model.fit(data, steps_per_epoch=chunk, epochs=1, verbose=0)  # tracing
    if args.barrier:  # both processes time together (the same CPU sharing as the real run)
        barrier = Path(args.barrier)
        (barrier / f"ready-{os.uname().nodename}-{os.getpid()}").touch()
        while len(list(barrier.glob("ready-*"))) < args.parties:
            time.sleep(POLL_SECONDS)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds or steps < 2 * chunk:
        model.fit(data, steps_per_epoch=chunk, epochs=1, verbose=0)
        steps += chunk
    seconds = time.perf_counter() - start
    write_json(Path(args.result), {"model": args.model, "steps": steps, "seconds": seconds,
                                   "step_ms": 1000 * seconds / steps, "host": os.uname().nodename})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("horovod", "parameter_server", "single"), required=True)
    parser.add_argument("--model", choices=sorted(workload.MODELS), default="small")
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--ps", type=int, default=1, help="parameter_server: ps tasks (variables sharded)")
    parser.add_argument("--control", help="the control directory (horovod, parameter_server)")
    parser.add_argument("--seconds", type=float, default=3.0, help="single: how long to time steps")
    parser.add_argument("--barrier", help="single: wait here until --parties processes are ready to time")
    parser.add_argument("--parties", type=int, default=2, help="single: processes meeting at --barrier")
    parser.add_argument("--result", help="single: where to write the result")
    args = parser.parse_args(argv)
    if args.backend == "single":
        if not args.result:
            parser.error("--backend single needs --result FILE")
        time_compute(args)
    else:
        if not args.control:
            parser.error(f"--backend {args.backend} needs --control DIR")
        serve_phases(args)


if __name__ == "__main__":
    main()
