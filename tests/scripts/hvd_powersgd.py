"""One horovodrun job that trains with PowerSGD (issue 38) on both Kerases, side by side in each rank.

    horovodrun -np 2 python hvd_powersgd.py OUTDIR

For each Keras (tf-keras, then Keras 3) the ranks build the same MLP (16 -> 64 -> 48 -> 4, weights
from one seed), wrap SGD with tfdist's allreduce and PowerSGD (rank 2, compression from the third
step), and fit 8 steps on data of their own in three fits (2 plain steps, 4 compressed, 2 more), each
epoch ending with ``SynchronizePowerSGD``. After the sixth step rank 0 writes a
``tf.train.Checkpoint(model, optimizer)``; every rank then restores it into a fresh model and
optimizer and trains the same last 2 steps. Each rank writes ``rank<R>.json``: per Keras, the weights
after the 8 steps and after the resumed 2, PowerSGD's step counts, which gradients it compressed, and
the rank of the middle kernel's update over the 4 compressed steps. Then the same through
``make_strategy("horovod", compression="powersgd", powersgd_rank=2, powersgd_start_iter=2)`` and
``strategy.fit`` (2 epochs of 4 steps, each rank its share of the arrays): ``strategy-<keras>``, the
weights, PowerSGD's step count, and the first error matrix after the last epoch's end (made the ranks'
mean there, by the ``SynchronizePowerSGD`` the strategy adds). Last, ``mixed-<keras>``: the same MLP under
``mixed_float16`` with a loss scale of 2**20 to start from, so that the first steps overflow in float16
and the loss-scale optimizer skips them: the weights, PowerSGD's steps, the scale at the end, the
largest error (in the gradient's units) and the losses.
"""
from __future__ import annotations

import json
import os
import sys

import tfdist  # before TensorFlow

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from tfdist.callbacks.powersgd import SynchronizePowerSGD
from tfdist.runtime.allreduce import AllreduceSettings, distributed_optimizer, powersgd_state
from tfdist.runtime.lowrank import PowerSGDSettings

OUTDIR = sys.argv[1]
hvd.init()
rank = hvd.rank()
SETTINGS = PowerSGDSettings(rank=2, start_iter=2, min_compression_rate=2.0)


def build(K):
    model = K.Sequential([K.Input((16,)), K.layers.Dense(64, activation="relu"), K.layers.Dense(48, activation="relu"),
                          K.layers.Dense(4)])
    rng = np.random.default_rng(0)  # the same weights on every rank
    model.set_weights([rng.normal(scale=0.3, size=w.shape).astype("float32") for w in model.get_weights()])
    optimizer = distributed_optimizer(K.optimizers.SGD(0.05), AllreduceSettings(
        op=hvd.Average, compression=hvd.Compression.none, powersgd=SETTINGS))
    model.compile(optimizer=optimizer, loss="mse")
    return model, optimizer


def run(flavour: str) -> dict:
    import importlib

    K = importlib.import_module("tf_keras" if flavour == "tf_keras" else "keras")
    rng = np.random.default_rng(100 + rank)  # each rank its own data
    x = rng.normal(size=(128, 16)).astype("float32")
    y = rng.normal(size=(128, 4)).astype("float32")
    sync = [SynchronizePowerSGD()]
    model, optimizer = build(K)
    model.fit(x[:32], y[:32], batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=sync)  # 2 plain steps
    before = model.get_weights()[2]
    model.fit(x[32:96], y[32:96], batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=sync)  # 4 compressed
    update = model.get_weights()[2] - before  # the 64 x 48 kernel: 4 updates of rank 2 at most
    state = powersgd_state(optimizer)
    folder = os.path.join(OUTDIR, f"ckpt-{flavour}")
    if rank == 0:  # the chief's checkpoint, after the epoch end made the errors equal on both ranks
        tf.train.Checkpoint(model=model, optimizer=optimizer).write(os.path.join(folder, "ckpt"))
    hvd.allreduce(tf.constant(0.0), name=f"written.{flavour}")  # a barrier: the checkpoint is there
    step_at_checkpoint = int(state.step.numpy())
    model.fit(x[96:], y[96:], batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=sync)  # 2 more
    again, again_optimizer = build(K)
    tf.train.Checkpoint(model=again, optimizer=again_optimizer).read(os.path.join(folder, "ckpt"))
    again.fit(x[96:], y[96:], batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=sync)  # the same 2
    return {"weights": [w.tolist() for w in model.get_weights()], "step": int(state.step.numpy()),
            "step_at_checkpoint": step_at_checkpoint, "compressed": [s is not None for s in state.slots],
            "update_rank": int(np.linalg.matrix_rank(update, tol=1e-6)),
            "resumed_step": int(powersgd_state(again_optimizer).step.numpy()),
            "resumed_weights": [w.tolist() for w in again.get_weights()]}


def through_the_strategy(flavour: str) -> dict:
    """``make_strategy("horovod", compression="powersgd", ...)`` and ``strategy.fit``: 2 epochs of 4 steps."""
    import importlib

    K = importlib.import_module("tf_keras" if flavour == "tf_keras" else "keras")
    rng = np.random.default_rng(7)  # the same arrays on every rank: the strategy gives each its share
    x = rng.normal(size=(128, 16)).astype("float32")
    y = rng.normal(size=(128, 4)).astype("float32")
    with STRATEGY.scope():
        model = K.Sequential([K.Input((16,)), K.layers.Dense(64, activation="relu"),
                              K.layers.Dense(48, activation="relu"), K.layers.Dense(4)])
        model.set_weights([np.random.default_rng(0).normal(scale=0.3, size=w.shape).astype("float32")
                           for w in model.get_weights()])
        model.compile(optimizer=STRATEGY.optimizer(K.optimizers.SGD(0.05), scale_lr=False), loss="mse")
    STRATEGY.fit(model, x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    state = powersgd_state(model.optimizer)
    return {"weights": [w.tolist() for w in model.get_weights()], "step": int(state.step.numpy()),
            "errors_equal_at_epoch_end": [e.numpy().tolist() for e in state.errors][:1]}


def under_mixed_float16(flavour: str) -> dict:
    """``mixed_float16``: the loss-scale optimizer hands PowerSGD scaled gradients; 24 steps from a scale
    of 2**20, whose first steps overflow in float16 and are skipped on every rank."""
    import importlib

    K = importlib.import_module("tf_keras" if flavour == "tf_keras" else "keras")
    K.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = K.Sequential([K.Input((16,)), K.layers.Dense(64, activation="relu"),
                              K.layers.Dense(48, activation="relu"), K.layers.Dense(4, dtype="float32")])
        model.set_weights([np.random.default_rng(0).normal(scale=0.3, size=w.shape).astype("float32")
                           for w in model.get_weights()])
        scaled = K.mixed_precision.LossScaleOptimizer(K.optimizers.SGD(0.05), initial_scale=2.0 ** 20)
        optimizer = distributed_optimizer(scaled, AllreduceSettings(
            op=hvd.Average, compression=hvd.Compression.none, powersgd=SETTINGS))
        model.compile(optimizer=optimizer, loss="mse")
        rng = np.random.default_rng(100 + rank)
        x, y = rng.normal(size=(384, 16)).astype("float32"), rng.normal(size=(384, 4)).astype("float32")
        history = model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
        state = powersgd_state(optimizer)
        scale = optimizer.loss_scale if flavour == "tf_keras" else optimizer.scale_loss(1.0)
        return {"weights": [w.tolist() for w in model.get_weights()], "step": int(state.step.numpy()),
                "scale": float(np.asarray(scale)), "loss": history.history["loss"],
                "largest_error": max(float(np.max(np.abs(e.numpy()))) for e in state.errors)}
    finally:
        K.mixed_precision.set_global_policy("float32")


found = {flavour: run(flavour) for flavour in ("tf_keras", "keras_3")}
found.update({f"mixed-{flavour}": under_mixed_float16(flavour) for flavour in ("tf_keras", "keras_3")})
STRATEGY = tfdist.make_strategy("horovod", compression="powersgd", powersgd_rank=2, powersgd_start_iter=2)
found.update({f"strategy-{flavour}": through_the_strategy(flavour) for flavour in ("tf_keras", "keras_3")})
with open(os.path.join(OUTDIR, f"rank{rank}.json"), "w") as out:
    json.dump(found, out)
print(f"POWERSGD DONE rank {rank}", flush=True)
