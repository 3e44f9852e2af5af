"""Run on every worker by tests/strategies/test_multi_worker_mirrored_powersgd.py through `tfdist launch`:
make_strategy("multi_worker_mirrored", compression="powersgd") in three phases on one cluster (issue 38).

plain: a model at fixed initial weights trained with an optimizer that did not go through
    strategy.optimizer (what compression="none" trains: its wrap is the identity).
full_rank: the same model and start through strategy.optimizer: rank 2 is full rank for its kernels
    (8x2 and 2x1), start_iter 0, so PowerSGD compresses from the first step and loses nothing.
resume: a model with an 8x16 kernel (rank 2 loses some of it: the error feedback is not zero) trained
    2 epochs, checkpointed (every worker saves: the chief to OUTDIR/ckpt, the other to a throwaway
    directory), trained 2 more epochs (the uninterrupted run); then a model at other initial weights
    restores the chief's checkpoint and trains the same 2 epochs (the resumed run).
loop: the same through strategy.setup / function / minimize and strategy.checkpoint: each worker's
    errors before and after the first epoch's save, then a resumed loop against the uninterrupted one.
keras_3: plain and full_rank again with Keras 3 models (its optimizer sums the replicas' gradients in
    ``_all_reduce_sum_gradients``, where PowerSGD goes), and PowerSGD's step count.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

OUTDIR = sys.argv[1]
strategy = tfdist.make_strategy("multi_worker_mirrored", compression="powersgd", powersgd_rank=2,
                                powersgd_start_iter=0, powersgd_min_compression_rate=0)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
out: dict = {"rank": strategy.rank, "replicas": strategy.num_replicas_in_sync}


def build(width: int, seed: int, wrap: bool) -> tf.keras.Model:
    with strategy.scope():
        tf.keras.utils.set_random_seed(seed)
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(width, activation="tanh"),
                                     tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(0.05, momentum=0.5)
        model.compile(optimizer=strategy.optimizer(optimizer, scale_lr=False) if wrap else optimizer, loss="mse")
    return model


def weights(model: tf.keras.Model) -> list:
    return [w.tolist() for w in model.get_weights()]


def fit(model: tf.keras.Model, **kwargs) -> list:
    return strategy.fit(model, x, y, batch_size=16, shuffle=False, verbose=0, **kwargs).history["loss"]


# plain and full rank: the same initial weights on every worker (seed 1)
plain = build(2, 1, wrap=False)
out["plain_loss"] = fit(plain, epochs=2)
out["plain"] = weights(plain)
full = build(2, 1, wrap=True)
out["full_rank_loss"] = fit(full, epochs=2)
out["full_rank"] = weights(full)

# resume: save after epoch 2, go on to 4; a fresh model restores and goes on too
first = build(16, 2, wrap=True)
out["resume_loss"] = fit(first, epochs=2)
ckpt_dir = os.path.join(OUTDIR, "ckpt") if strategy.is_chief else tempfile.mkdtemp()
saved = tf.train.Checkpoint(model=first, optimizer=first.optimizer).write(os.path.join(ckpt_dir, "ckpt"))
if strategy.is_chief:  # what the checkpoint holds of PowerSGD's state: name -> norm
    out["saved_state"] = {name: float(np.linalg.norm(tf.train.load_variable(saved, name)))
                          for name, _ in tf.train.list_variables(saved) if "tfdist_powersgd" in name}
out["resume_loss"] += fit(first, epochs=4, initial_epoch=2)
out["uninterrupted"] = weights(first)
second = build(16, 3 + strategy.rank, wrap=True)  # other weights, per worker: the restore must set them all
status = tf.train.Checkpoint(model=second, optimizer=second.optimizer).read(os.path.join(OUTDIR, "ckpt", "ckpt"))
out["resumed_loss"] = fit(second, epochs=4, initial_epoch=2)
status.assert_consumed()  # every saved value (the PowerSGD state among them) found its variable
out["resumed"] = weights(second)


# loop: strategy.setup / function / minimize through the same PowerSGD; strategy.checkpoint's save
# averages the workers' errors first (the strategy's _loop_before_save), so any worker's state is the job's
def loop_run(seed: int, restore: bool) -> tf.keras.Model:
    with strategy.scope():
        tf.keras.utils.set_random_seed(seed)
        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="tanh"),
                                     tf.keras.layers.Dense(1)])
        optimizer = strategy.optimizer(tf.keras.optimizers.SGD(0.05, momentum=0.5), scale_lr=False)
    strategy.setup(model, optimizer)
    data = strategy.distribute(tf.data.Dataset.from_tensor_slices((x, y)), batch_size=16)  # no shuffle

    @strategy.function
    def train_step(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            loss = strategy.average_loss(tf.square(model(features, training=True) - labels)[:, 0])
        strategy.minimize(tape, loss)
        return {"loss": loss}

    checkpoint = strategy.checkpoint(os.path.join(OUTDIR, "loop_ckpt"))
    start = checkpoint.restore() if restore else 0
    iterator = iter(data)
    for epoch in range(start, 2):
        for _ in range(data.steps_per_epoch):
            train_step(iterator)
        if epoch == 0:
            out["loop_errors_before_save"] = local_errors(optimizer)
            checkpoint.save(epoch + 1)
            out["loop_errors_after_save"] = local_errors(optimizer)
    return model


def local_errors(optimizer) -> list:
    state = getattr(optimizer, "tfdist_powersgd")
    with strategy.scope():
        return [state.local(error).numpy().tolist() for error in state.errors]


out["loop_uninterrupted"] = weights(loop_run(2, restore=False))
out["loop_resumed"] = weights(loop_run(5 + strategy.rank, restore=True))


def build_keras_3(seed: int, wrap: bool):
    import keras

    with strategy.scope():
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="tanh"), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.05, momentum=0.5)
        model.compile(optimizer=strategy.optimizer(optimizer, scale_lr=False) if wrap else optimizer, loss="mse")
    return model


plain_3 = build_keras_3(1, wrap=False)
out["keras_3_plain_loss"] = fit(plain_3, epochs=2)
out["keras_3_plain"] = weights(plain_3)
full_3 = build_keras_3(1, wrap=True)
out["keras_3_full_rank_loss"] = fit(full_3, epochs=2)
out["keras_3_full_rank"] = weights(full_3)
out["keras_3_powersgd_steps"] = int(getattr(full_3.optimizer, "tfdist_powersgd").step.numpy())
with open(os.path.join(OUTDIR, f"worker{strategy.rank}.json"), "w") as f:
    json.dump(out, f)
