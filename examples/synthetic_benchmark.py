"""Synthetic throughput benchmark, in the spirit of Horovod's tensorflow2_keras_synthetic_benchmark.

    python examples/synthetic_benchmark.py
    horovodrun -np 2 -H localhost:2 python examples/synthetic_benchmark.py
    tfdist launch --workers 2 --ps 1 -- python examples/synthetic_benchmark.py
    tfdist launch --backend multi_worker_mirrored --workers 2 -- python examples/synthetic_benchmark.py

Random images and labels, so the figure measures the training step and the gradient exchange,
not the input pipeline. After ``--num-warmup-batches``, each iteration is one epoch of
``--num-batches-per-iter`` batches, timed by epoch hooks (ParameterServerStrategy cannot run
batch-level callbacks). Prints images/s per worker (mean +- 1.96 std over iterations) and in
total; the last line is the result.
"""
from __future__ import annotations

import argparse

import tfdist  # before tensorflow

import numpy as np
import tensorflow as tf

from tfdist.callbacks import TensorBoardRun

MODELS = {
    "mlp": lambda shape, classes: tf.keras.Sequential([
        tf.keras.Input(shape), tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(512, activation="relu"), tf.keras.layers.Dense(512, activation="relu"),
        tf.keras.layers.Dense(classes)]),
    "cnn": lambda shape, classes: tf.keras.Sequential([
        tf.keras.Input(shape),
        tf.keras.layers.Conv2D(32, 3, activation="relu"), tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(64, 3, activation="relu"), tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(classes)]),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategy", default="auto", choices=tfdist.available_strategies(),
                        help="the backend (default: auto, chosen from the launcher's environment)")
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64, help="per replica (default: 64)")
    parser.add_argument("--num-warmup-batches", type=int, default=5, help="untimed batches first")
    parser.add_argument("--num-batches-per-iter", type=int, default=10, help="batches per timed iteration")
    parser.add_argument("--num-iters", type=int, default=5, help="timed iterations")
    parser.add_argument("--fp16-allreduce", action="store_true", help="Horovod: fp16 gradient compression")
    parser.add_argument("--logdir", default="runs")
    args = parser.parse_args(argv)

    if args.fp16_allreduce and args.strategy not in ("auto", "horovod"):
        parser.error(f"--fp16-allreduce is a Horovod option; --strategy {args.strategy} "
                     "has no allreduce to compress")
    horovod = {"compression": "fp16" if args.fp16_allreduce else "none"}
    strategy = tfdist.make_strategy(args.strategy, **tfdist.options_for(args.strategy, {"horovod": horovod}))
    shape, classes = (args.image_size, args.image_size, 3), 10
    with strategy.scope():
        model = MODELS[args.model](shape, classes)
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(0.01)),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    images = rng.random((args.batch_size, *shape), dtype=np.float32)
    labels = rng.integers(0, classes, size=(args.batch_size,))
    # Single examples, repeated; with batch_size, tfdist batches them per replica on every backend.
    examples = tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
    if args.num_warmup_batches:  # tracing and the first exchanges stay out of the figures
        strategy.fit(model, examples, batch_size=args.batch_size, epochs=1,
                     steps_per_epoch=args.num_warmup_batches, verbose=0)
    throughput = strategy.throughput(args.batch_size)
    board = TensorBoardRun(args.logdir, strategy=strategy, batch_size=args.batch_size,
                           hparams={"model": args.model, "benchmark": "synthetic"})
    strategy.fit(model, examples, batch_size=args.batch_size, epochs=args.num_iters,
                 steps_per_epoch=args.num_batches_per_iter, callbacks=[throughput, board], verbose=0)
    if strategy.is_chief:
        workers = strategy.num_workers
        rates = np.array(throughput.history) / workers  # images/s of one worker, per iteration
        print(f"Model: {args.model}, batch size {args.batch_size} per replica, {workers} worker(s), "
              f"{strategy.num_replicas_in_sync} replica(s) in sync")
        for i, rate in enumerate(rates):
            print(f"Iter #{i}: {rate:.1f} img/sec per worker")
        mean, conf = rates.mean(), 1.96 * rates.std()
        print(f"Img/sec per worker: {mean:.1f} +-{conf:.1f}")
        print(f"RESULT strategy={strategy.kind} workers={workers} model={args.model} "
              f"images_per_second={mean * workers:.1f} per_worker={mean:.1f}", flush=True)


if __name__ == "__main__":
    main()
