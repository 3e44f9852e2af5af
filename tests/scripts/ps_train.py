"""Scenarios run by tests/strategies/test_parameter_server.py through `tfdist launch`.

    python ps_train.py MODE OUTDIR

Every task runs this script; server tasks block inside make_strategy. Before that, each task
records its pid in OUTDIR/pids/<type>-<index>, so the chief can kill a task on purpose.
With PS_TRAIN_START_SIGNAL=<file> set, the task imports TensorFlow, creates <file>.ready, waits until
<file> exists and only then joins the cluster (a restart after an orchestrator's back-off, its import
done early); once make_strategy has returned it creates <file>.joined. With PS_TRAIN_KILL_AFTER=<file>
set, a Saboteur waits until <file> exists before it kills.
"""
from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import time

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

START_SIGNAL_ENV, KILL_AFTER_ENV = "PS_TRAIN_START_SIGNAL", "PS_TRAIN_KILL_AFTER"
MODE, OUTDIR = sys.argv[1], sys.argv[2]
task = json.loads(os.environ["TF_CONFIG"])["task"]
os.makedirs(os.path.join(OUTDIR, "pids"), exist_ok=True)
with open(os.path.join(OUTDIR, "pids", f"{task['type']}-{task['index']}"), "w") as f:
    f.write(str(os.getpid()))

options = {"checkpoint_dir": os.path.join(OUTDIR, "checkpoints")}
if MODE == "sharded":
    options["shards"] = 2
if MODE == "plain":
    options["chief_grace_seconds"] = 5  # the servers leave soon after the chief is done
# restart-alone: the defaults, chief_grace_seconds and cluster_timeout of 60 s (only a hang outlasts them)
if MODE == "lone-chief":  # a restarted chief whose servers are all gone: it gives up after 20 s
    options["cluster_timeout"] = 20
if MODE == "worker-dies-at-start":
    if (task["type"], task["index"]) == ("worker", 1):
        sys.exit("worker:1 fails before serving, on purpose")
    options["cluster_timeout"] = 15
if task["type"] == "chief":  # registered before make_strategy, so it runs after tfdist's own exit handler
    @atexit.register
    def _coordinator_threads_at_exit() -> None:
        """The ClusterCoordinator's threads still running when the interpreter is about to finalize
        (one returning from TensorFlow's C++ then would abort the chief): OUTDIR/exit-threads.json."""
        import threading

        names = [t.name for t in threading.enumerate() if t.daemon and t.name.startswith(
            ("WorkerPreemptionHandler", "WorkerClosureProcessingLoop-"))]
        with open(os.path.join(OUTDIR, "exit-threads.json"), "w") as f:
            json.dump(names, f)


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.1)


def touch(path: str) -> None:
    with open(path, "w"):
        pass


if os.environ.get(START_SIGNAL_ENV):
    touch(os.environ[START_SIGNAL_ENV] + ".ready")
    wait_for(os.environ[START_SIGNAL_ENV])
strategy = tfdist.make_strategy("auto", **options)  # TF_CONFIG with ps tasks -> parameter_server
if os.environ.get(START_SIGNAL_ENV):
    touch(os.environ[START_SIGNAL_ENV] + ".joined")
VOCAB, EPOCHS = 1000, 5 if MODE.startswith("restart") else 4


def data(n: int = 2048, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(n, 4))
    return ids, (ids % 2).sum(axis=1, keepdims=True).astype("float32")


def build_model() -> tf.keras.Model:
    tf.keras.utils.set_random_seed(0)
    return tf.keras.Sequential([
        tf.keras.Input((4,), dtype="int64"),
        tf.keras.layers.Embedding(VOCAB, 16, name="embedding"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(1),
    ])


with strategy.scope():
    model = build_model()
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adagrad(0.1)), loss="mse")


def pid_of(name: str) -> int:
    with open(os.path.join(OUTDIR, "pids", name)) as f:
        return int(f.read())


class Saboteur(tf.keras.callbacks.Callback):
    """Kills a task of the cluster with SIGKILL at the start of epoch ``at_epoch``."""

    def __init__(self, victim: str, at_epoch: int) -> None:
        super().__init__()
        self.victim, self.at_epoch = victim, at_epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.at_epoch:
            if os.environ.get(KILL_AFTER_ENV):
                wait_for(os.environ[KILL_AFTER_ENV])
            print(f"killing {self.victim}", flush=True)
            with open(os.path.join(OUTDIR, "fault-time"), "w") as f:  # tests time the reaction from here
                f.write(repr(time.time()))
            os.kill(pid_of(self.victim) if self.victim != "chief-0" else os.getpid(), signal.SIGKILL)


class EpochLog(tf.keras.callbacks.Callback):
    """Appends every finished epoch to OUTDIR/epochs.txt (survives a chief restart)."""

    def on_epoch_end(self, epoch, logs=None):
        with open(os.path.join(OUTDIR, "epochs.txt"), "a") as f:
            f.write(f"{epoch} {logs['loss']:.6f}\n")


callbacks: list = [EpochLog()]
if MODE == "kill-worker":
    callbacks.append(Saboteur("worker-1", at_epoch=1))
elif MODE == "kill-ps":
    callbacks.append(Saboteur("ps-0", at_epoch=1))
elif MODE.startswith("restart"):
    callbacks.insert(0, tf.keras.callbacks.BackupAndRestore(os.path.join(OUTDIR, "backup")))
    if not os.path.exists(os.path.join(OUTDIR, "epochs.txt")):  # first launch only
        callbacks.append(Saboteur("chief-0", at_epoch=2))

x, y = data()
history = strategy.fit(model, x, y, batch_size=32, epochs=EPOCHS, callbacks=callbacks, verbose=2,
                       validation_data=data(256, seed=1))
if strategy.is_evaluator:  # its model goes (the callbacks hold it too), and TensorFlow's checkpoint
    del model, history, callbacks  # statuses with it, as when a user's training function returns
    gc.collect()                   # (TensorFlow prints its warnings about them then)
if strategy.is_chief:
    result = {"loss": history.history["loss"], "epochs": history.epoch,
              "kind": strategy.kind, "num_ps": strategy.num_ps, "num_workers": strategy.num_workers}
    devices = lambda var: [v.device for v in getattr(var, "variables", [var])]  # noqa: E731
    result["embedding_devices"] = devices(model.get_layer("embedding").embeddings)
    result["kernel_devices"] = devices(model.layers[-1].kernel)
    if MODE == "sharded":
        path = os.path.join(OUTDIR, "saved", "weights")
        model.save_weights(path)
        with strategy.scope():
            restored = build_model()
            restored.compile(optimizer=tf.keras.optimizers.Adagrad(0.1), loss="mse")
        restored.load_weights(path)
        result["restore_max_abs_diff"] = max(
            float(np.max(np.abs(a - b))) for a, b in zip(model.get_weights(), restored.get_weights()))
    result["evaluate"] = strategy.evaluate(model, *data(256, seed=2), batch_size=64, verbose=0)
    with open(os.path.join(OUTDIR, "chief.json"), "w") as f:
        json.dump(result, f)
