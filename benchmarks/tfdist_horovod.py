"""The baseline_horovod.py workload through tfdist.

    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/tfdist_horovod.py --model small

make_strategy("horovod") does hvd.init; strategy.optimizer scales the learning rate and wraps it
in DistributedOptimizer; strategy.fit shards the arrays and adds the broadcast and metric callbacks.
"""
from __future__ import annotations

import argparse

import tfdist  # before tensorflow

import tensorflow as tf  # noqa: E402

import workload  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    workload.add_arguments(parser)
    args = parser.parse_args()

    strategy = tfdist.make_strategy("horovod")
    with strategy.scope():
        model = workload.build_model(args.model)
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(workload.LEARNING_RATE)),
                      loss=workload.loss())
    x, y = workload.make_data(args.steps * args.batch_size * strategy.size)
    timer = workload.EpochTimer(args.warmup_epochs)
    strategy.fit(model, x, y, batch_size=args.batch_size, epochs=args.warmup_epochs + args.epochs,
                 callbacks=[timer], verbose=0)
    if strategy.is_chief:
        workload.report("tfdist", "horovod", model, args, timer,
                        examples_per_step=args.batch_size * strategy.size, workers=strategy.size)


if __name__ == "__main__":
    main()
