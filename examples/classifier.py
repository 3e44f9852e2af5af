"""Train a Keras image classifier with any tfdist strategy, unchanged across launchers.

    python examples/classifier.py                                       # one process
    horovodrun -np 2 -H localhost:2 python examples/classifier.py       # Horovod ring-allreduce
    tfdist launch --workers 2 --ps 1 -- python examples/classifier.py   # parameter servers
    tfdist launch --backend multi_worker_mirrored --workers 2 -- python examples/classifier.py

``--strategy`` (default ``auto``) names a backend instead of letting the launcher decide.
``--keras 3`` builds the model with Keras 3 (``import keras``) instead of tf-keras (the Keras 2
API, ``--keras 2``, the default); every backend but parameter servers trains either (Keras 3
cannot drive parameter servers):

    horovodrun -np 2 -H localhost:2 python examples/classifier.py --keras 3

Data: the UCI handwritten digits (8x8, 1,797 images, shipped with tfdist: `tfdist.datasets`), or
``--data mnist.npz`` in Keras' layout (x_train, y_train, x_test, y_test). TensorBoard logs go
to ``--logdir/<run-name>/`` (with every worker's step times, the time to ``--target-accuracy`` and
each task's CPU, memory and network under ``system/``); the last line printed is the result.

``--export DIR`` then exports the trained model for serving (``strategy.export``: written once by the
chief, verified in a fresh process, a ``serving_default`` signature; an existing export there is
replaced): ``saved_model_cli run --dir DIR --tag_set serve --signature_def serving_default ...``.
"""
from __future__ import annotations

import argparse
import importlib
import time
from types import ModuleType

import tfdist

import numpy as np
import tensorflow as tf

from tfdist.callbacks import SystemMetrics, TensorBoardRun


def load_data(path: str | None, seed: int = 0) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(x_train, y_train), (x_test, y_test) as float32 images in [0, 1] with a channel axis."""
    if path:
        with np.load(path) as data:
            missing = {"x_train", "y_train", "x_test", "y_test"} - set(data.files)
            if missing:
                raise SystemExit(f"--data {path}: missing arrays {sorted(missing)}; expected Keras' "
                                 "mnist.npz layout (x_train, y_train, x_test, y_test)")
            x_train, y_train, x_test, y_test = (data[k] for k in ("x_train", "y_train", "x_test", "y_test"))
        scale = 255.0
    else:
        from tfdist.datasets import load_digits

        digits = load_digits()
        images, labels = digits.images, digits.target
        order = np.random.default_rng(seed).permutation(len(images))
        images, labels = images[order], labels[order]
        split = int(0.8 * len(images))
        x_train, y_train, x_test, y_test = images[:split], labels[:split], images[split:], labels[split:]
        scale = 16.0
    prepare = lambda x: (x.astype("float32") / scale)[..., None]  # noqa: E731
    return (prepare(x_train), y_train.astype("int64")), (prepare(x_test), y_test.astype("int64"))


KERAS = {"2": "tf_keras", "3": "keras"}  # --keras: the package to build with


def build_model(input_shape: tuple[int, ...], classes: int = 10, keras: ModuleType | None = None) -> tf.Module:
    """A small CNN from ``keras`` (the ``keras`` or, by default, the ``tf_keras`` package)."""
    keras = keras if keras is not None else importlib.import_module(KERAS["2"])
    return keras.Sequential([
        keras.Input(input_shape),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(classes),
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategy", default="auto", choices=tfdist.available_strategies(),
                        help="the backend (default: auto, chosen from the launcher's environment)")
    parser.add_argument("--keras", default="2", choices=sorted(KERAS),
                        help="2: tf-keras (default, every backend); 3: Keras 3 (horovod, mirrored, single)")
    parser.add_argument("--data", help="an .npz file in Keras' MNIST layout (default: the digits shipped with tfdist)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker (default: 32)")
    parser.add_argument("--lr", type=float, default=1e-3, help="single-worker learning rate")
    parser.add_argument("--warmup-epochs", type=float,
                        help="Horovod LR warm-up in epochs (default: 1 under horovod and auto)")
    parser.add_argument("--logdir", default="runs", help="TensorBoard root (default: runs)")
    parser.add_argument("--run-name", help="TensorBoard run name (default: strategy-workers-batch-time)")
    parser.add_argument("--target-accuracy", type=float, default=0.9,
                        help="record the wall time at which val_accuracy first reaches this (default: 0.9)")
    parser.add_argument("--export", metavar="DIR",
                        help="export the trained model to DIR as a SavedModel for serving (replaces one there)")
    args = parser.parse_args(argv)

    if args.warmup_epochs is not None and args.strategy not in ("auto", "horovod"):
        parser.error(f"--warmup-epochs is a Horovod option; --strategy {args.strategy} has no LR warm-up")
    horovod = {"warmup_epochs": 1.0 if args.warmup_epochs is None else args.warmup_epochs}
    strategy = tfdist.make_strategy(args.strategy, **tfdist.options_for(args.strategy, {"horovod": horovod}))
    keras = importlib.import_module(KERAS[args.keras])
    (x_train, y_train), (x_test, y_test) = load_data(args.data)
    with strategy.scope():
        model = build_model(x_train.shape[1:], keras=keras)
        model.compile(optimizer=strategy.optimizer(keras.optimizers.Adam(args.lr)),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    board = TensorBoardRun(args.logdir, args.run_name, strategy=strategy, batch_size=args.batch_size,
                           hparams={"base_lr": args.lr, "epochs": args.epochs, "keras": args.keras},
                           targets={"val_accuracy": args.target_accuracy})
    # Throughput and the backend's per-worker figures, then TensorBoard; every task's CPU, memory, network.
    metrics = strategy.metrics(args.batch_size)
    throughput = metrics[0]
    start = time.perf_counter()
    strategy.fit(model, x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                 validation_data=(x_test, y_test), callbacks=[*metrics, board, SystemMetrics(board)],
                 verbose=2)
    elapsed = time.perf_counter() - start
    results = strategy.evaluate(model, x_test, y_test, batch_size=args.batch_size, verbose=0,
                                return_dict=True)
    board.record_evaluation(results)
    exported = strategy.export(model, args.export, overwrite=True) if args.export else None
    if strategy.is_chief:
        rate = throughput.mean_examples_per_second  # the first epoch (tracing) left out when there are more
        reached = board.reached.get(f"val_accuracy>={args.target_accuracy:g}")
        print(f"RESULT strategy={strategy.kind} workers={strategy.num_workers} keras={args.keras} "
              f"test_accuracy={results['accuracy']:.4f} test_loss={results['loss']:.4f} "
              f"examples_per_second={rate:.0f} train_seconds={elapsed:.1f} "
              f"time_to_target_s={'not-reached' if reached is None else f'{reached:.1f}'} "
              f"plan={strategy.plan.variant if strategy.plan else 'none'} "
              f"compression={getattr(strategy.options, 'compression', 'none')} "
              f"logdir={board.run_dir}" + (f" export={exported}" if exported else ""), flush=True)


if __name__ == "__main__":
    main()
