"""A job of an adaptive run, driven by a test that writes the launcher's verdicts itself: ``make_strategy
("auto")`` (the plan in TFDIST_PLAN, the run folder in TFDIST_ADAPT) and a small fit with Adam.

    python adaptive_switch.py OUTDIR KERAS EPOCHS [again]     # KERAS: tf_keras or keras_3

The chief writes, under OUTDIR, what the tests compare across a switch: ``begin-<kind>-<N>.npz`` when
training begins (after ``strategy.fit`` restored a switch's checkpoint; N: the first epoch it trains)
and ``end-<E>.npz`` after each epoch E, each with the model's weights, the optimizer's variables (slots
and iterations) in creation order; and ``wire-<E>.json`` (Horovod, MultiWorkerMirrored): the variant and
compression the task's own strategy object held during epoch E, and the dtypes its traced train step
allreduces gradients in (read from the graphs of the step that trained the epoch; MultiWorkerMirrored:
``["powersgd"]`` when its optimizer aggregates through PowerSGD, else none). The last line is ``DONE <kind>`` when fit ran to its end (a task
that stops for a switch ends inside ``strategy.fit``). With ``again``, a second ``strategy.fit`` of one
epoch follows (``AGAIN <kind>``): a process's later fits are not followed by the launcher. The first
fit also records the run for TensorBoard in ``OUTDIR/runs/adaptive`` (``TensorBoardRun``).
"""
from __future__ import annotations

import importlib
import json
import os
import sys

import tfdist  # before tensorflow

import numpy as np

OUTDIR, KERAS, EPOCHS = sys.argv[1], sys.argv[2], int(sys.argv[3])
K = importlib.import_module("keras" if KERAS == "keras_3" else "tf_keras")


def state(model) -> dict[str, np.ndarray]:
    """The model's weights and the optimizer's variables, by position."""
    variables = model.optimizer.variables
    variables = variables() if callable(variables) else variables
    arrays = {f"w{i}": np.asarray(w) for i, w in enumerate(model.get_weights())}
    arrays.update({f"o{i}": np.asarray(v.numpy()) for i, v in enumerate(variables)})
    return arrays


def allreduced_dtypes(train_function) -> list[str]:
    """The dtypes of the Horovod allreduce ops in the traced train step (nested functions included):
    tf-keras's ``train_function`` is a ``tf.function``; Keras 3's a Python function over them."""
    import tensorflow as tf

    functions = [train_function] + [cell.cell_contents for cell in (getattr(train_function, "__closure__", None) or ())
                                    if hasattr(cell.cell_contents, "_list_all_concrete_functions")]
    found = set()
    for function in functions:
        for concrete in getattr(function, "_list_all_concrete_functions", lambda: [])():
            graph = concrete.graph.as_graph_def()
            nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
            found.update(tf.dtypes.as_dtype(n.attr["T"].type).name for n in nodes
                         if n.op.startswith("Horovod") and "Allreduce" in n.op)
    return sorted(found)


class Snapshot(K.callbacks.Callback):
    def __init__(self, kind: str, chief: bool) -> None:
        super().__init__()
        self.kind, self.chief, self.first = kind, chief, None

    def on_epoch_begin(self, epoch, logs=None):
        if self.first is None and self.chief:
            self.first = epoch
            np.savez(os.path.join(OUTDIR, f"begin-{self.kind}-{epoch}.npz"), **state(self.model))

    def on_epoch_end(self, epoch, logs=None):
        if self.chief:
            np.savez(os.path.join(OUTDIR, f"end-{epoch}.npz"), **state(self.model))
            if strategy.kind == "horovod":
                with open(os.path.join(OUTDIR, f"wire-{epoch}.json"), "w") as out:
                    json.dump({"variant": strategy.plan.variant, "compression": strategy.options.compression,
                               "dtypes": allreduced_dtypes(self.model.train_function)}, out)
            elif strategy.kind == "multi_worker_mirrored":  # PowerSGD: whether the optimizer aggregates through it
                from tfdist.runtime.collective_powersgd import aggregates_through_powersgd

                with open(os.path.join(OUTDIR, f"wire-{epoch}.json"), "w") as out:
                    json.dump({"variant": strategy.plan.variant, "compression": strategy.options.compression,
                               "dtypes": ["powersgd"] if aggregates_through_powersgd(self.model.optimizer) else []},
                              out)


strategy = tfdist.make_strategy("auto")
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
with strategy.scope():
    model = K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="relu"), K.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(K.optimizers.Adam(1e-2), scale_lr=False), loss="mse")
fit = {"steps_per_epoch": 8} if strategy.kind == "parameter_server" else {}
record = tfdist.callbacks.TensorBoardRun(os.path.join(OUTDIR, "runs"), "adaptive", strategy=strategy)
strategy.fit(model, x, y, batch_size=16, epochs=EPOCHS, verbose=0, **fit,
             callbacks=[Snapshot(strategy.kind, strategy.is_chief), record])
print(f"DONE {strategy.kind}", flush=True)
if sys.argv[4:] == ["again"]:
    strategy.fit(model, x, y, batch_size=16, epochs=1, callbacks=[Snapshot(strategy.kind, strategy.is_chief)],
                 verbose=0, **fit)
    print(f"AGAIN {strategy.kind}", flush=True)
