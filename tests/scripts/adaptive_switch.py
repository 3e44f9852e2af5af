"""A job of an adaptive run, driven by a test that writes the launcher's verdicts itself: ``make_strategy
("auto")`` (the plan in TFDIST_PLAN, the run folder in TFDIST_ADAPT) and a small fit with Adam.

    python adaptive_switch.py OUTDIR KERAS EPOCHS [again]     # KERAS: tf_keras or keras_3

The chief writes, under OUTDIR, what the tests compare across a switch: ``begin-<kind>-<N>.npz`` when
training begins (after ``strategy.fit`` restored a switch's checkpoint; N: the first epoch it trains)
and ``end-<E>.npz`` after each epoch E, each with the model's weights, the optimizer's variables (slots
and iterations) in creation order. The last line is ``DONE <kind>`` when fit ran to its end (a task
that stops for a switch ends inside ``strategy.fit``). With ``again``, a second ``strategy.fit`` of one
epoch follows (``AGAIN <kind>``): a process's later fits are not followed by the launcher. The first
fit also records the run for TensorBoard in ``OUTDIR/runs/adaptive`` (``TensorBoardRun``).
"""
from __future__ import annotations

import importlib
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
