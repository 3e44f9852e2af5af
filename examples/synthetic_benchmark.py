"""Synthetic throughput benchmark, in the spirit of Horovod's tensorflow2_keras_synthetic_benchmark.

    python examples/synthetic_benchmark.py
    horovodrun -np 2 -H localhost:2 python examples/synthetic_benchmark.py
    tfdist launch --workers 2 --ps 1 -- python examples/synthetic_benchmark.py

Random images and labels, so the figure measures the training step and the gradient exchange,
not the input pipeline. Prints images/s per worker (mean +- 1.96 std over iterations) and in
total; the last line is the result.
"""
from __future__ import annotations

import argparse
import timeit

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


class IterationTimer(tf.keras.callbacks.Callback):
    """Times every ``batches_per_iter`` batches after the warm-up batches."""

    def __init__(self, batches_per_iter: int, warmup_batches: int) -> None:
        super().__init__()
        self.batches_per_iter, self.warmup_batches = batches_per_iter, warmup_batches
        self.durations: list[float] = []
        self._seen, self._start = 0, None

    def on_train_batch_end(self, batch, logs=None):
        self._seen += 1
        done = self._seen - self.warmup_batches
        if done == 0:
            self._start = timeit.default_timer()
        elif done > 0 and done % self.batches_per_iter == 0:
            now = timeit.default_timer()
            self.durations.append(now - self._start)
            self._start = now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--num-warmup-batches", type=int, default=5)
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=5)
    parser.add_argument("--fp16-allreduce", action="store_true", help="Horovod: fp16 gradient compression")
    parser.add_argument("--logdir", default="runs")
    args = parser.parse_args()

    strategy = tfdist.make_strategy(args.strategy, compression="fp16" if args.fp16_allreduce else "none")
    shape, classes = (args.image_size, args.image_size, 3), 10
    with strategy.scope():
        model = MODELS[args.model](shape, classes)
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(0.01)),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    images = rng.random((args.batch_size, *shape), dtype=np.float32)
    labels = rng.integers(0, classes, size=(args.batch_size,))
    per_replica = tf.data.Dataset.from_tensors((images, labels)).repeat()
    steps = args.num_warmup_batches + args.num_iters * args.num_batches_per_iter
    timer = IterationTimer(args.num_batches_per_iter, args.num_warmup_batches)
    board = TensorBoardRun(args.logdir, strategy=strategy, batch_size=args.batch_size,
                           hparams={"model": args.model, "benchmark": "synthetic"})
    # The dataset already holds whole per-worker batches; every rank may read the same one.
    strategy.fit(model, per_replica, epochs=1, steps_per_epoch=steps, callbacks=[timer, board],
                 verbose=0)
    rates = np.array([args.batch_size * args.num_batches_per_iter / d for d in timer.durations])
    if strategy.is_chief:
        workers = strategy.num_replicas_in_sync
        print(f"Model: {args.model}, batch size {args.batch_size} per worker, {workers} worker(s)")
        for i, rate in enumerate(rates):
            print(f"Iter #{i}: {rate:.1f} img/sec per worker")
        mean, conf = rates.mean(), 1.96 * rates.std()
        print(f"Img/sec per worker: {mean:.1f} +-{conf:.1f}")
        print(f"RESULT strategy={strategy.kind} workers={workers} model={args.model} "
              f"images_per_second={mean * workers:.1f} per_worker={mean:.1f}", flush=True)


if __name__ == "__main__":
    main()
