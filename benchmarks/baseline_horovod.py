"""Hand-written Horovod training, as a user would wire it without tfdist.

    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/baseline_horovod.py --model small

hvd.init, learning rate scaled by size, data sharded by rank, DistributedOptimizer, and the
initial weights broadcast from rank 0 after the first batch (so the optimizer state exists).
Horovod's own Keras callbacks are not used: they fail with tf-keras 2.21.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras = tf-keras, before TensorFlow loads

import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402
from horovod.tensorflow.keras import DistributedOptimizer  # noqa: E402

import workload  # noqa: E402


class BroadcastAfterFirstBatch(tf.keras.callbacks.Callback):
    """Copy rank 0's model and optimizer variables to every rank once, after the first step."""

    def __init__(self) -> None:
        super().__init__()
        self.done = False

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        if self.done:
            return
        hvd.broadcast_variables(self.model.variables, root_rank=0)
        hvd.broadcast_variables(self.model.optimizer.variables, root_rank=0)
        self.done = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    workload.add_arguments(parser)
    args = parser.parse_args()

    hvd.init()
    model = workload.build_model(args.model)
    optimizer = DistributedOptimizer(tf.keras.optimizers.SGD(workload.LEARNING_RATE * hvd.size()))
    model.compile(optimizer=optimizer, loss=workload.loss())
    x, y = workload.make_data(args.steps * args.batch_size * hvd.size())
    x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
    timer = workload.EpochTimer(args.warmup_epochs)
    model.fit(x, y, batch_size=args.batch_size, epochs=args.warmup_epochs + args.epochs,
              callbacks=[BroadcastAfterFirstBatch(), timer], verbose=0)
    if hvd.rank() == 0:
        workload.report("baseline", "horovod", model, args, timer,
                        examples_per_step=args.batch_size * hvd.size(), workers=hvd.size())


if __name__ == "__main__":
    main()
