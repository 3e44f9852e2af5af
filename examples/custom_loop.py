"""A custom training loop (``tf.GradientTape``) on tfdist's strategy object: one loop, every backend.

    python examples/custom_loop.py
    horovodrun -np 2 -H localhost:2 python examples/custom_loop.py --keras 3
    tfdist launch --backend multi_worker_mirrored --workers 2 -- python examples/custom_loop.py
    tfdist launch --workers 2 --ps 1 -- python examples/custom_loop.py

The loop is the same under each: ``make_strategy("auto")`` picks the backend its launcher implies, and the
strategy's loop calls (``setup``, ``distribute``, ``function``, ``average_loss``, ``minimize``, ``reduce``,
``checkpoint``) do what that backend needs (docs/custom-loops.md). It trains a small classifier on the
8x8 digits shipped with tfdist; ``--keras 3`` builds it with Keras 3 (on every backend; under parameter
servers each variable stays whole on one ps task), ``--keras 2`` (the default) with tf-keras. With ``--checkpoint-dir`` a rerun resumes after the last
finished epoch; ``--mixed-precision`` trains under ``mixed_float16``, with loss scaling. The chief prints one line per epoch and a ``RESULT`` line.
"""
from __future__ import annotations

import tfdist  # before tensorflow: keeps tf.keras on tf-keras

import argparse
import importlib
from types import ModuleType
from typing import Any, Callable

import tensorflow as tf

from tfdist.datasets import load_digits

KERAS = {"2": "tf_keras", "3": "keras"}  # --keras: the package to build with


def digits() -> tf.data.Dataset:
    """The 1,797 digits as (64 floats in [0, 1], label) examples, unbatched."""
    data = load_digits()
    images = (data.images.reshape(len(data.images), 64) / 16.0).astype("float32")
    return tf.data.Dataset.from_tensor_slices((images, data.target.astype("int32")))


def build_model(keras: ModuleType, seed: int = 0) -> Any:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                             keras.layers.Dense(10, dtype="float32")])  # float32 logits under mixed precision


def train(strategy: Any, keras: ModuleType, epochs: int = 3, batch_size: int = 32, learning_rate: float = 0.1,
          checkpoint_dir: str | None = None, log: Callable[[str], None] = print) -> tuple[Any, list[dict], Any, int]:
    """Train with ``strategy``'s loop; ``(model, the epochs' logs, the step, the epoch it started at)``.
    ``batch_size`` is per replica; ``learning_rate`` is scaled by the replicas (``strategy.optimizer``)."""
    with strategy.scope():
        model = build_model(keras)
        optimizer = keras.optimizers.SGD(learning_rate)
        if keras.mixed_precision.global_policy().name == "mixed_float16":  # float16 needs loss scaling
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        optimizer = strategy.optimizer(optimizer)
    strategy.setup(model, optimizer)
    data = strategy.distribute(digits().shuffle(2048, seed=0, reshuffle_each_iteration=False), batch_size=batch_size)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @strategy.function
    def train_step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = strategy.average_loss(loss_fn(y, logits))
        strategy.minimize(tape, loss)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), y), tf.float32)
        return {"loss": loss, "accuracy": strategy.average_loss(correct)}

    checkpoint = strategy.checkpoint(checkpoint_dir) if checkpoint_dir else None
    start = checkpoint.restore() if checkpoint else 0
    iterator = iter(data)
    history = []
    for epoch in range(start, epochs):
        logs = strategy.reduce("sum", [train_step(iterator) for _ in range(data.steps_per_epoch)])
        history.append(logs)
        if checkpoint:
            checkpoint.save(epoch + 1)
        if strategy.is_chief:
            log(f"epoch {epoch + 1}/{epochs}: loss {logs['loss']:.4f} accuracy {logs['accuracy']:.4f}")
    return model, history, train_step, start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keras", default="2", choices=sorted(KERAS), help="2: tf-keras (default); 3: Keras 3")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--lr", type=float, default=0.1, help="for one replica; scaled by the replicas")
    parser.add_argument("--checkpoint-dir", default=None, help="save every epoch; a rerun resumes")
    parser.add_argument("--mixed-precision", action="store_true", help="the mixed_float16 policy")
    args = parser.parse_args(argv)
    keras = importlib.import_module(KERAS[args.keras])
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = tfdist.make_strategy("auto")
    _, history, _, start = train(strategy, keras, args.epochs, args.batch_size, args.lr, args.checkpoint_dir)
    if strategy.is_chief:
        last = history[-1] if history else {"loss": float("nan"), "accuracy": float("nan")}
        print(f"RESULT strategy={strategy.kind} workers={strategy.num_workers} keras={args.keras} "
              f"start_epoch={start} loss={last['loss']:.4f} accuracy={last['accuracy']:.4f}", flush=True)


if __name__ == "__main__":
    main()
