"""The baseline_ps.py workload through tfdist.

    tfdist launch --workers 2 --ps 1 -- python benchmarks/tfdist_ps.py --model small

On ps and worker tasks make_strategy serves and exits when the chief is done; on the chief
strategy.fit turns the arrays into a per-worker DatasetCreator. Without --steps-per-execution
tfdist's default applies.
"""
from __future__ import annotations

import argparse

import tfdist  # before tensorflow

import tensorflow as tf  # noqa: E402

import workload  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    workload.add_arguments(parser)
    parser.add_argument("--steps-per-execution", type=int, default=None,
                        help="passed to make_strategy (default: tfdist's default)")
    args = parser.parse_args()

    options = {} if args.steps_per_execution is None else {"steps_per_execution": args.steps_per_execution}
    strategy = tfdist.make_strategy("parameter_server", **options)
    with strategy.scope():
        model = workload.build_model(args.model)
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(workload.LEARNING_RATE)),
                      loss=workload.loss())
    x, y = workload.make_data(workload.PS_EXAMPLES)
    timer = workload.EpochTimer(args.warmup_epochs)
    strategy.fit(model, x, y, batch_size=args.batch_size, steps_per_epoch=args.steps,
                 epochs=args.warmup_epochs + args.epochs, callbacks=[timer], verbose=0)
    workload.report("tfdist", "parameter_server", model, args, timer, examples_per_step=args.batch_size,
                    workers=strategy.num_workers,
                    steps_per_execution=int(model._steps_per_execution.numpy()))


if __name__ == "__main__":
    main()
