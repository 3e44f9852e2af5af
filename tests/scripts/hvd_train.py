"""Scenarios run under horovodrun by tests/strategies/test_horovod.py.

    python hvd_train.py MODE OUTDIR [KIND]
    python hvd_train.py several OUTDIR PART [PART ...]   (PART: train, equivalence, lazy/KIND or resume)
    python hvd_train.py kerases OUTDIR KERAS=PART[,PART ...] [KERAS=...]   (KERAS: tf_keras or keras_3)

Each rank writes OUTDIR/rank<N>.json; the test compares them. ``several`` runs the PARTs one after
the other in one job (one start-up for all), each in OUTDIR/<PART with - for />. TFDIST_TEST_KERAS
picks the Keras the models, optimizers and callbacks come from: ``tf_keras`` (default) or ``keras_3``.
``kerases`` runs ``several OUTDIR/<KERAS> PART ...`` for each KERAS in turn in the same job, this
script again as its own ``__main__`` with TFDIST_TEST_KERAS set to KERAS (tf.keras is the same).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

if os.environ.get("TFDIST_TEST_KERAS", "tf_keras") == "keras_3":
    import keras as K
else:
    import tf_keras as K

from tfdist.callbacks import MetricAverage, TensorBoardRun

MODE, OUTDIR = sys.argv[1], sys.argv[2]
LR = 0.05


def data(n: int = 256, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.1).astype("float32")
    return x, y


def build_model(seed: int) -> K.Model:
    K.utils.set_random_seed(seed)
    return K.Sequential([K.Input((8,)), K.layers.Dense(16, activation="tanh"),
                                K.layers.Dense(1)])


def weights(model: K.Model) -> list:
    return [w.tolist() for w in model.get_weights()]


class RawLogs(K.callbacks.Callback):
    """The per-rank epoch logs before MetricAverage (placed after it) averages them."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[dict] = []

    def on_epoch_end(self, epoch, logs=None):
        self.raw.append({k: float(v) for k, v in logs.items()})


class LearningRates(K.callbacks.Callback):
    """The optimizer's learning rate at the start of every batch (after the warm-up set it)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.values.append(float(self.model.optimizer.learning_rate.numpy()))


def dump(outdir: str, rank: int, payload: dict) -> None:
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(payload, f)


def train(outdir: str) -> None:
    # auto must resolve to horovod under horovodrun; LR scaling and a 2-epoch warm-up are on.
    strategy = tfdist.make_strategy("auto", warmup_epochs=2)
    with strategy.scope():
        model = build_model(seed=100 + strategy.rank)  # different per rank: the broadcast must fix it
        model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(LR)), loss="mse", metrics=["mae"])
    initial = weights(model)
    raw, lrs = RawLogs(), LearningRates()
    checkpoint = K.callbacks.ModelCheckpoint(
        os.path.join(outdir, f"ckpt-rank{strategy.rank}", "model-{epoch}.weights.h5"), save_weights_only=True)
    board = TensorBoardRun(os.path.join(outdir, "tb"), run_name=f"run-rank{strategy.rank}",
                           strategy=strategy, batch_size=16)
    history = strategy.fit(model, *data(), batch_size=16, epochs=3, validation_data=data(64, seed=7),
                           callbacks=[raw, MetricAverage(), lrs, strategy.throughput(16), checkpoint, board])
    dump(outdir, strategy.rank, {
        "flavour": tfdist.keras_compat.flavour_of(model), "kind": strategy.kind, "size": strategy.size, "is_chief": strategy.is_chief,
        "initial_weights": initial, "final_weights": weights(model),
        "raw_logs": raw.raw, "history": history.history, "lrs": lrs.values,
        "steps": history.params["steps"],
        "evaluate": strategy.evaluate(model, *data(64, seed=9), batch_size=16, return_dict=True),
    })


def equivalence(outdir: str) -> None:
    # Plain SGD, no LR scaling: 2 ranks x batch 16 must equal 1 process x batch 32.
    strategy = tfdist.make_strategy("horovod", scale_lr=False)
    with strategy.scope():
        model = build_model(seed=1)
        model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(LR)), loss="mse")
    strategy.fit(model, *data(), batch_size=16, epochs=2, shuffle=False)
    payload = {"distributed": weights(model), "tf_keras_is": tfdist.keras_compat.tf_keras_flavour(tf)}
    if strategy.rank == 0:
        reference = build_model(seed=1)
        reference.compile(optimizer=K.optimizers.SGD(LR), loss="mse")
        reference.fit(*data(), batch_size=32, epochs=2, shuffle=False, verbose=0)
        payload["reference"] = weights(reference)
    dump(outdir, strategy.rank, payload)


def raw(outdir: str) -> None:
    # An optimizer compiled without strategy.optimizer() averages nothing: fit refuses it (the ranks
    # trained apart and the job exited 0). Horovod's own tf-keras wrapper, kept by a port, is taken, and
    # the strategy's compression, which cannot reach it, is said to be left out.
    strategy = tfdist.make_strategy("horovod", compression="fp16")
    with strategy.scope():
        model = build_model(seed=1)
        model.compile(optimizer=K.optimizers.SGD(LR), loss="mse")
    payload: dict = {"refused": None}
    try:
        strategy.fit(model, *data(seed=strategy.rank), batch_size=16, epochs=1, verbose=0)
        payload["trained"] = weights(model)
    except ValueError as exc:
        payload["refused"] = str(exc)
    if tfdist.keras_compat.flavour_of(model) == tfdist.keras_compat.TF_KERAS:
        import horovod.tensorflow.keras as hvd

        with strategy.scope():
            ported = build_model(seed=1)
            ported.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(LR)), loss="mse")
        said: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: said.append(record.getMessage())
        logging.getLogger("tfdist").addHandler(handler)
        try:
            strategy.fit(ported, *data(seed=strategy.rank), batch_size=16, epochs=1, verbose=0)
            strategy.fit(ported, *data(seed=strategy.rank), batch_size=16, epochs=1, verbose=0)  # said once
        finally:
            logging.getLogger("tfdist").removeHandler(handler)
        payload["horovods_own"] = weights(ported)
        payload["said"] = said
    dump(outdir, strategy.rank, payload)


def lazy(outdir: str, kind: str) -> None:
    # Models that create their weights lazily (Horovod's own example has no Input): ranks start
    # from different weights, Adam (slots), and must match one process with twice the batch.

    class Subclassed(K.Model):
        def __init__(self):
            super().__init__()
            self.hidden = K.layers.Dense(16, activation="tanh")
            self.out = K.layers.Dense(1)

        def call(self, inputs, training=False):
            return self.out(self.hidden(inputs))

    def lazy_model(seed: int) -> K.Model:
        K.utils.set_random_seed(seed)
        if kind == "sequential":
            return K.Sequential([K.layers.Dense(16, activation="tanh"), K.layers.Dense(1)])
        if kind == "subclassed":
            return Subclassed()
        if kind == "functional":
            return build_model(seed)
        raise SystemExit(f"unknown model kind {kind!r}")

    class InitialWeights(K.callbacks.Callback):
        """The weights every rank starts training from, after tfdist's broadcast."""

        def on_train_begin(self, logs=None):
            self.weights = weights(self.model)

    strategy = tfdist.make_strategy("horovod", scale_lr=False)
    if strategy.rank == 1:  # a model one rank alone builds (a summary, an evaluation copy) renumbers the
        build_model(seed=0)  # layers after it there: the broadcast must not pair weights by their names
    with strategy.scope():
        model = lazy_model(seed=100 + strategy.rank)
        model.compile(optimizer=strategy.optimizer(K.optimizers.Adam(0.01)), loss="mse")
    built_before_fit = model.built
    start = InitialWeights()
    strategy.fit(model, *data(), batch_size=16, epochs=2, shuffle=False, callbacks=[start])
    payload = {"built_before_fit": built_before_fit, "initial": start.weights, "distributed": weights(model)}
    if strategy.rank == 0:
        reference = lazy_model(seed=7)
        reference(data()[0][:1])
        reference.set_weights([np.array(w, dtype="float32") for w in start.weights])
        reference.compile(optimizer=K.optimizers.Adam(0.01), loss="mse")
        reference.fit(*data(), batch_size=32, epochs=2, shuffle=False, verbose=0)
        payload["reference"] = weights(reference)
    dump(outdir, strategy.rank, payload)


def resume(outdir: str) -> None:
    # BackupAndRestore on every rank. In the first run rank 1 fails as epoch 2 begins; rank 0 goes on
    # into epoch 2 and would wait in its first allreduce forever: the job must end all the same. The
    # second run resumes both ranks at epoch 2.
    strategy = tfdist.make_strategy("horovod")
    first_run = not os.path.exists(os.path.join(outdir, "first-run-done"))
    with strategy.scope():
        model = build_model(seed=1)
        model.compile(optimizer=strategy.optimizer(K.optimizers.SGD(LR)), loss="mse")

    class Progress(K.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if first_run and epoch == 2:
                if strategy.rank == 0:
                    open(os.path.join(outdir, "first-run-done"), "w").close()
                else:
                    with open(os.path.join(outdir, "fault-time"), "w") as f:  # the test times the reaction
                        f.write(repr(time.time()))
                    raise RuntimeError("rank 1 stops the first run at epoch 2 on purpose")

        def on_epoch_end(self, epoch, logs=None):
            with open(os.path.join(outdir, f"epochs-rank{strategy.rank}.txt"), "a") as f:
                f.write(f"{epoch}\n")

    backup = K.callbacks.BackupAndRestore(os.path.join(outdir, "backup"))
    strategy.fit(model, *data(), batch_size=16, epochs=4, callbacks=[backup, Progress()])


MODES = {"train": train, "equivalence": equivalence, "resume": resume, "raw": raw,
         "lazy": lambda outdir: lazy(outdir, sys.argv[3])}


if MODE == "kerases":
    import runpy

    groups = [group.partition("=") for group in sys.argv[3:]]
    if not groups or any(keras not in ("tf_keras", "keras_3") or not parts for keras, _, parts in groups):
        raise SystemExit(f"usage: hvd_train.py kerases OUTDIR KERAS=PART[,PART ...] ..., got {sys.argv[1:]}")
    for keras, _, parts in groups:
        os.environ["TFDIST_TEST_KERAS"] = keras
        sys.argv = [os.path.abspath(__file__), "several", os.path.join(OUTDIR, keras), *parts.split(",")]
        runpy.run_path(sys.argv[0], run_name="__main__")
elif MODE == "several":
    for part in sys.argv[3:]:
        name, *rest = part.split("/")
        outdir = os.path.join(OUTDIR, part.replace("/", "-"))
        os.makedirs(outdir, exist_ok=True)
        if name == "lazy":
            lazy(outdir, *rest)
        else:
            MODES[name](outdir)
elif MODE in MODES:
    MODES[MODE](OUTDIR)
else:
    raise SystemExit(f"unknown mode {MODE!r}")
