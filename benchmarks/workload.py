"""The workload every benchmark script trains: two MLPs, random data, an epoch timer, one result line.

Shared by the baselines and the tfdist scripts, so both sides train exactly the same thing.
Importing this module imports TensorFlow: set ``TF_USE_LEGACY_KERAS=1`` (or ``import tfdist``) first.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

INPUT_DIM, CLASSES = 784, 10
# Hidden layer widths: 784-512-512-10 has 669,706 parameters, 784-2048-2048-10 has 5,824,522.
MODELS = {"small": (512, 512), "large": (2048, 2048)}
LEARNING_RATE = 0.01
SEED = 0
PS_EXAMPLES = 4096  # parameter server: the dataset every worker reads (its shard), repeated
BENCH_PREFIX = "BENCH"


def build_model(name: str) -> tf.keras.Model:
    """The named MLP, with the same initial weights in every process and implementation."""
    tf.keras.utils.set_random_seed(SEED)
    layers = [tf.keras.Input((INPUT_DIM,))]
    layers += [tf.keras.layers.Dense(width, activation="relu") for width in MODELS[name]]
    layers.append(tf.keras.layers.Dense(CLASSES))
    return tf.keras.Sequential(layers)


def loss() -> tf.keras.losses.Loss:
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_data(examples: int) -> tuple[np.ndarray, np.ndarray]:
    """Uniform random inputs and labels, identical in every process (fixed seed)."""
    rng = np.random.default_rng(SEED)
    x = rng.random((examples, INPUT_DIM), dtype=np.float32)
    y = rng.integers(0, CLASSES, size=(examples,), dtype=np.int64)
    return x, y


#: The digits the MLP is validated on (the last ones of the shipped set); it trains on the others.
DIGITS_HELD_OUT = 297


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """The shipped 8x8 digits as the MLP's 784 inputs: each pixel a 3x3 block, in a 28x28 frame, 0..1."""
    from tfdist.datasets import load_digits

    digits = load_digits()
    images = np.kron(digits.images / 16.0, np.ones((3, 3)))  # 24x24
    framed = np.pad(images, ((0, 0), (2, 2), (2, 2))).reshape(len(images), INPUT_DIM).astype(np.float32)
    return framed, digits.target


def make_digits(examples: int) -> tuple[np.ndarray, np.ndarray]:
    """``examples`` training digits (all but the held-out ones, repeated in one fixed shuffled order):
    the same arrays in every process, so the backends train on the same examples."""
    x, y = _digits()
    x, y = x[:-DIGITS_HELD_OUT], y[:-DIGITS_HELD_OUT]
    order = np.random.default_rng(SEED).permutation(len(x))
    index = np.resize(order, examples)
    return x[index], y[index]


def digits_accuracy(weights: list[np.ndarray]) -> float:
    """The accuracy on the held-out digits of the MLP with ``weights`` (``model.get_weights()``:
    kernel, bias per Dense layer), computed in NumPy on the process that asks."""
    x, y = _digits()
    h = x[-DIGITS_HELD_OUT:]
    layers = list(zip(weights[::2], weights[1::2]))
    for kernel, bias in layers[:-1]:
        h = np.maximum(h @ kernel + bias, 0.0)
    kernel, bias = layers[-1]
    return float(np.mean(np.argmax(h @ kernel + bias, axis=1) == y[-DIGITS_HELD_OUT:]))


class EpochTimer(tf.keras.callbacks.Callback):
    """Wall time from the end of the warm-up epochs to the end of the last epoch.

    Epoch-level hooks only, so it runs unchanged under ParameterServerStrategy (which refuses
    batch hooks) and adds no per-step work anywhere. The warm-up epochs hold the tracing.
    """

    def __init__(self, warmup_epochs: int) -> None:
        super().__init__()
        self.warmup_epochs = warmup_epochs
        self.start: float | None = None
        self.end: float | None = None
        self.cpu_start = self.cpu_end = 0.0  # this process's CPU time (all threads), same points
        self.steps_per_epoch: int | None = None
        self.epoch_seconds: list[float] = []
        #: Epochs timed (after the warm-up; a run resumed mid-way, by an adaptive launch, counts from its
        #: first epoch's end).
        self.timed_epochs = 0
        self._last: float | None = None

    def on_train_begin(self, logs=None) -> None:
        self.steps_per_epoch = (self.params or {}).get("steps")
        self._last = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        now = time.perf_counter()
        self.epoch_seconds.append(now - self._last)
        self._last = now
        if self.start is None and epoch >= self.warmup_epochs - 1:
            self.start, self.cpu_start = now, time.process_time()
        elif self.start is not None:
            self.timed_epochs += 1
        self.end, self.cpu_end = now, time.process_time()

    @property
    def seconds(self) -> float:
        if self.start is None or self.end is None or self.end <= self.start:
            raise RuntimeError("no timed epoch finished; run more epochs than warm-up epochs")
        return self.end - self.start


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark script takes."""
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--steps", type=int, default=50,
                        help="steps per epoch (Horovod: per rank; parameter server: all workers together)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs, after the warm-up")
    parser.add_argument("--warmup-epochs", type=int, default=1)


def report(impl: str, backend: str, model: tf.keras.Model, args: argparse.Namespace,
           timer: EpochTimer, examples_per_step: int, **extra: object) -> None:
    """Print the one machine-readable result line that compare.py parses.

    The step count is the one Keras ran (``params["steps"]``), not the one asked for.
    """
    steps = (timer.steps_per_epoch or args.steps) * args.epochs
    seconds = timer.seconds
    fields = {"impl": impl, "backend": backend, "model": args.model, "params": model.count_params(),
              "examples_per_sec": f"{steps * examples_per_step / seconds:.1f}",
              "steps": steps, "seconds": f"{seconds:.3f}",
              "cpu_ms_per_step": f"{1000 * (timer.cpu_end - timer.cpu_start) / steps:.2f}",
              "epoch_seconds": ",".join(f"{s:.2f}" for s in timer.epoch_seconds), **extra}
    print(BENCH_PREFIX + " " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)
