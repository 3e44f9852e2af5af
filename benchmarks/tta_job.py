"""The time-to-accuracy job: examples/classifier.py's digits model, trained until a target accuracy.

Started on every task by ``tfdist launch`` (see ``time_to_accuracy.py``)::

    python benchmarks/tta_job.py --backend horovod --target 0.95 --max-epochs 40 --out run.json
    python benchmarks/tta_job.py --backend horovod --compression fp16 --out run.json

The model and data are classifier.py's own (``load_data``, ``build_model``, imported from the file),
trained the way a user trains them: ``tfdist.make_strategy(BACKEND)`` with its default options (so
Horovod scales the learning rate by its size, parameter servers do not), ``strategy.optimizer``,
``strategy.fit`` with the validation data. An epoch-level callback on rank 0 / the chief times from
``on_train_begin`` to the end of each epoch, records the validation accuracy, and stops training at
the first epoch that reaches ``--target`` (under Horovod the epoch figures are averaged over the ranks
before it reads them, so every rank stops at the same epoch). Rank 0 / the chief writes ``--out``, with
the strategy's own ``kind`` and ``compression`` (what the run really used). ``--compression fp16``
(Horovod only) is ``make_strategy("horovod", compression="fp16")``: gradients cast to float16 for the
allreduce.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import tfdist  # before tensorflow: keeps tf.keras on tf-keras

import tensorflow as tf

CLASSIFIER = Path(__file__).resolve().parents[1] / "examples" / "classifier.py"


def load_classifier():
    """examples/classifier.py as a module (its ``load_data`` and ``build_model``)."""
    spec = importlib.util.spec_from_file_location("tfdist_example_classifier", CLASSIFIER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TimeToTarget(tf.keras.callbacks.Callback):
    """Epoch-level only (it also runs under ParameterServerStrategy): the curve and the stop."""

    def __init__(self, target: float) -> None:
        super().__init__()
        self.target = target
        self.start: float | None = None
        self.curve: list[dict] = []
        self.reached_epoch: int | None = None

    def on_train_begin(self, logs=None) -> None:
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        logs = logs or {}
        accuracy = float(logs.get("val_accuracy", float("nan")))
        self.curve.append({"epoch": epoch + 1, "seconds": time.perf_counter() - self.start,
                           "val_accuracy": accuracy, "loss": float(logs.get("loss", float("nan"))),
                           "examples_per_second": logs.get("examples_per_second")})
        if accuracy >= self.target and self.reached_epoch is None:
            self.reached_epoch = epoch + 1
            self.model.stop_training = True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", required=True, choices=["horovod", "parameter_server", "multi_worker_mirrored"])
    parser.add_argument("--compression", choices=["none", "fp16", "powersgd"], default="none",
                        help="the allreduce's compression (make_strategy's option): horovod; powersgd also "
                             "multi_worker_mirrored")
    parser.add_argument("--target", type=float, default=0.95, help="validation accuracy to reach")
    parser.add_argument("--max-epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=1e-3, help="single-worker Adam rate (classifier.py's)")
    parser.add_argument("--out", required=True, help="JSON result, written by rank 0 / the chief")
    args = parser.parse_args(argv)
    takes = {"horovod": ("fp16", "powersgd"), "multi_worker_mirrored": ("powersgd",)}.get(args.backend, ())
    if args.compression != "none" and args.compression not in takes:
        parser.error(f"--compression {args.compression} does not apply to --backend {args.backend}; fix: drop "
                     "it, or pick --backend horovod")

    classifier = load_classifier()
    options = {"compression": args.compression} if args.compression != "none" else {}
    strategy = tfdist.make_strategy(args.backend, **options)
    (x_train, y_train), (x_test, y_test) = classifier.load_data(None)
    with strategy.scope():
        model = classifier.build_model(x_train.shape[1:])
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(args.lr)),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    timer = TimeToTarget(args.target)
    throughput = strategy.throughput(args.batch_size)
    strategy.fit(model, x_train, y_train, batch_size=args.batch_size, epochs=args.max_epochs,
                 validation_data=(x_test, y_test), callbacks=[throughput, timer], verbose=0)
    if not strategy.is_chief:
        return
    rates = throughput.history[1:] or throughput.history  # the first epoch includes tracing
    reached = timer.reached_epoch
    result = {
        "backend": strategy.kind, "compression": getattr(strategy.options, "compression", "none"),
        "workers": strategy.num_workers, "batch_size": args.batch_size,
        "target": args.target, "max_epochs": args.max_epochs, "reached": reached is not None,
        "epochs_to_target": reached,
        "seconds_to_target": timer.curve[reached - 1]["seconds"] if reached else None,
        "examples_per_second": sum(rates) / len(rates) if rates else None,
        "final_val_accuracy": timer.curve[-1]["val_accuracy"] if timer.curve else None,
        "curve": timer.curve,
    }
    Path(args.out).write_text(json.dumps(result))
    print("TTA " + json.dumps({k: v for k, v in result.items() if k != "curve"}), flush=True)


if __name__ == "__main__":
    main()
