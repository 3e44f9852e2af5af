"""The baseline_horovod.py workload through tfdist.

    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/tfdist_horovod.py --model small

make_strategy("horovod") does hvd.init; strategy.optimizer scales the learning rate and wraps it
in DistributedOptimizer; strategy.fit shards the arrays and adds the broadcast and metric callbacks.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile

import tfdist  # before tensorflow

import tensorflow as tf  # noqa: E402

import workload  # noqa: E402


def metrics_callbacks(strategy, batch_size: int, logdir: str) -> list:
    """Every figure a run records: throughput and per-worker times, TensorBoard with a target, system."""
    from tfdist.callbacks import SystemMetrics, TensorBoardRun

    board = TensorBoardRun(logdir, run_name="bench", strategy=strategy, batch_size=batch_size,
                           targets={"loss": 0.1})
    return [*strategy.metrics(batch_size), board, SystemMetrics(board)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    workload.add_arguments(parser)
    parser.add_argument("--metrics", choices=("none", "all"), default="none",
                        help="all: strategy.metrics, TensorBoardRun with a target and SystemMetrics, as "
                             "examples/classifier.py records them (benchmarks/metrics_overhead.py)")
    args = parser.parse_args()

    strategy = tfdist.make_strategy("horovod")
    with strategy.scope():
        model = workload.build_model(args.model)
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(workload.LEARNING_RATE)),
                      loss=workload.loss())
    x, y = workload.make_data(args.steps * args.batch_size * strategy.size)
    timer = workload.EpochTimer(args.warmup_epochs)
    logdir = tempfile.mkdtemp(prefix="tfdist-bench-") if args.metrics == "all" else None
    callbacks = metrics_callbacks(strategy, args.batch_size, logdir) if logdir else []
    try:  # the timer last: its clock includes every other callback's epoch-end work
        strategy.fit(model, x, y, batch_size=args.batch_size, epochs=args.warmup_epochs + args.epochs,
                     callbacks=[*callbacks, timer], verbose=0)
    finally:
        if logdir:
            shutil.rmtree(logdir, ignore_errors=True)
    if strategy.is_chief:
        workload.report("tfdist", "horovod", model, args, timer,
                        examples_per_step=args.batch_size * strategy.size, workers=strategy.size)


if __name__ == "__main__":
    main()
