"""An elastic Horovod job for tests/strategies/test_elastic.py and tests/multihost/test_horovod_hosts.py.

    python hvd_elastic.py OUTDIR [--epochs N] [--epoch-seconds S] [--commit-every K] [--static] [--quiet]
                                 [--fail-once HOST:EPOCH] [--hosts-file F --remove-at E --add-at E]
                                 [--hold-from EPOCH:SIZE]

Every rank appends one JSON line per finished epoch to OUTDIR/epochs.jsonl (host, pid, rank, size,
epoch, time) and one line per start to OUTDIR/starts.jsonl; rank 0 writes OUTDIR/result.json at
the end (the History's epochs, logs and elastic sizes, the final weights). ``--fail-once`` makes the
rank on HOST (HOROVOD_HOSTNAME) exit at the start of EPOCH, once (a marker file in OUTDIR).
``--remove-at``/``--add-at``: rank 0 rewrites the discovery hosts file at the end of those epochs,
dropping then restoring its last line; then, in the next epoch's first batch, it waits until Horovod
has told it of the change, so the change lands on a batch commit (with --commit-every K >= 2),
never on the epoch's end (the discovery poll and the commits would otherwise race).
``--hold-from EPOCH:SIZE``: from the end of EPOCH on, rank 0 ends an epoch only once the job runs
SIZE ranks or Horovod has told it of a host change (up to ``HOST_CHANGE_WAIT`` s per epoch), so a
job with few epochs is not over before a host that comes back has rejoined (a test's short job).
``--quiet``: nothing on stdout or stderr (no progress bar, no log lines), like a rank that never
prints: its ssh session then never fails on a write when its launcher is gone.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import time

import numpy as np
import tensorflow as tf

import tfdist

parser = argparse.ArgumentParser()
parser.add_argument("outdir")
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--epoch-seconds", type=float, default=1.0)
parser.add_argument("--commit-every", type=int, default=0)
parser.add_argument("--fail-once", default=None)
parser.add_argument("--hosts-file", default=None)
parser.add_argument("--remove-at", type=int, default=None)
parser.add_argument("--add-at", type=int, default=None)
parser.add_argument("--hold-from", default=None, metavar="EPOCH:SIZE")
parser.add_argument("--static", action="store_true", help="elastic=False: the same job, not elastic")
parser.add_argument("--quiet", action="store_true")
args = parser.parse_args()
HOST = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())
if not args.quiet:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")  # tfdist's attempts, timed
HOST_CHANGE_WAIT = 120  # s: a change the driver never reports fails the test's assertions, not a hang
LR = 0.05


def append(name: str, record: dict) -> None:
    line = json.dumps({"host": HOST, "pid": os.getpid(), "time": time.time(), **record}) + "\n"
    fd = os.open(os.path.join(args.outdir, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write: lines of several processes never interleave
    finally:
        os.close(fd)


rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) + 0.1).astype("float32")

elastic = {} if args.static else {"elastic": True, "commit_every_batches": args.commit_every}
strategy = tfdist.make_strategy("horovod", **elastic)
append("starts.jsonl", {"rank": strategy.rank, "size": strategy.size})
with strategy.scope():
    tf.keras.utils.set_random_seed(100 + strategy.rank)  # different per rank: the sync must fix it
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.SGD(LR)), loss="mse")


def _host_change_pending() -> bool:
    """Whether Horovod's driver has told this rank of a host change not yet acted on (test-only
    peek at Horovod's notification listeners: the elastic states)."""
    from horovod.common.elastic import notification_manager

    return any(not listener._host_messages.empty() for listener in list(notification_manager._listeners))


class Record(tf.keras.callbacks.Callback):
    """Slow epochs (so host changes land mid-training), a planned failure, and the epoch record."""

    changed_at: int | None = None

    def on_epoch_begin(self, epoch, logs=None):
        if args.fail_once:
            host, at = args.fail_once.rsplit(":", 1)
            marker = os.path.join(args.outdir, "failed-once")
            if HOST == host and epoch == int(at) and not os.path.exists(marker):
                with open(marker, "w") as f:
                    f.write(repr(time.time()))
                os._exit(3)

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(args.epoch_seconds / max(1, self.params.get("steps") or 1))
        if batch == 0 and self.changed_at is not None:
            deadline = time.monotonic() + HOST_CHANGE_WAIT
            while not _host_change_pending() and time.monotonic() < deadline:
                time.sleep(0.1)
            self.changed_at = None

    def on_epoch_end(self, epoch, logs=None):
        if args.hold_from and strategy.rank == 0:
            at, size = (int(part) for part in args.hold_from.split(":"))
            deadline = time.monotonic() + HOST_CHANGE_WAIT
            while (epoch >= at and strategy.size < size and not _host_change_pending()
                   and time.monotonic() < deadline):
                time.sleep(0.1)
        append("epochs.jsonl", {"rank": strategy.rank, "size": strategy.size, "epoch": epoch,
                                "lr": float(self.model.optimizer.learning_rate.numpy()),
                                "steps": self.params.get("steps"), "loss": float(logs["loss"])})
        if strategy.rank == 0 and args.hosts_file and epoch in (args.remove_at, args.add_at):
            with open(args.hosts_file) as f:
                lines = f.read().split()
            if epoch == args.remove_at:
                shutil.copy(args.hosts_file, args.hosts_file + ".all")
                with open(args.hosts_file + ".tmp", "w") as f:
                    f.write("\n".join(lines[:-1]) + "\n")
            else:
                shutil.copy(args.hosts_file + ".all", args.hosts_file + ".tmp")
            os.replace(args.hosts_file + ".tmp", args.hosts_file)  # the discovery script never reads half a file
            self.changed_at = epoch


history = strategy.fit(model, x, y, batch_size=16, epochs=args.epochs, callbacks=[Record()],
                       **({"verbose": 0} if args.quiet else {}))
if strategy.rank == 0:
    with open(os.path.join(args.outdir, "result.json"), "w") as f:
        json.dump({"epoch": history.epoch, "history": history.history, "sizes": history.params.get("elastic_sizes"),
                   "size": strategy.size, "weights": [w.tolist() for w in model.get_weights()]}, f)
append("ends.jsonl", {"rank": strategy.rank, "size": strategy.size,
                      "weights": [w.tolist() for w in model.get_weights()]})
