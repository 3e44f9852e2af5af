"""Run by tests/multihost/test_memory.py on every task: an embedding model bigger than one ps host.

    python ps_memory.py SHARDS OUTDIR [VOCAB DIM]

The table is VOCAB x DIM float32 (default 1,048,576 x 128: 134M parameters, 512 MiB; the test's
module docstring says why that size) trained with Adagrad, whose one slot per variable doubles what
the ps tasks hold. With ``shards=1`` the table and
its slot live whole on one ps; with ``shards=2`` half of each lives on each of two. The chief trains
a few epochs (sparse updates: an Embedding lookup's gradient is IndexedSlices), writes
OUTDIR/chief.json (the losses, where the table's shards live, each shard's shape), exports the
model to OUTDIR/export with ``strategy.export`` (TensorFlow SavedModel, shards merged) and reloads
that export from disk with ``tf.saved_model.load`` (the chief's host has no memory cap): the
parameters it holds and its serving signature's output on a sample go in chief.json too.
"""
from __future__ import annotations

import json
import os
import sys
import time

import tfdist  # noqa: F401  (before tensorflow)

import numpy as np
import tensorflow as tf

SHARDS, OUTDIR = int(sys.argv[1]), sys.argv[2]
VOCAB, DIM = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (1_048_576, 128)
EPOCHS, EXAMPLES = 3, 2048
started = time.monotonic()
strategy = tfdist.make_strategy("parameter_server", shards=SHARDS, chief_grace_seconds=2, cluster_timeout=60)
# servers block above; only the chief goes on


def data(seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(EXAMPLES, 2))
    return ids, (ids % 2).sum(axis=1, keepdims=True).astype("float32")


with strategy.scope():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((2,), dtype="int64"),
        tf.keras.layers.Embedding(VOCAB, DIM, name="embedding"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(1),
    ])
    model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adagrad(0.5)), loss="mse")
built = time.monotonic()
x, y = data()
history = strategy.fit(model, x, y, batch_size=64, epochs=EPOCHS, verbose=0)
trained = time.monotonic()
table = model.get_layer("embedding").embeddings
shards = list(getattr(table, "variables", [table]))
export = strategy.export(model, os.path.join(OUTDIR, "export"), sample=x[:4])
exported = time.monotonic()
loaded = tf.saved_model.load(export)
outputs = list(loaded.signatures["serving_default"](tf.constant(x[:4])).values())[0].numpy()
result = {
    "loss": [float(v) for v in history.history["loss"]],
    "parameters": int(model.count_params()),
    "shard_devices": [v.device for v in shards],
    "shard_shapes": [list(v.shape) for v in shards],
    "export": export,
    "reloaded": {"parameters": int(sum(v.shape.num_elements() for v in loaded.variables)),
                 "shape": list(outputs.shape), "finite": bool(np.isfinite(outputs).all())},
    "seconds": {"build": round(built - started, 1), "fit": round(trained - built, 1),
                "export": round(exported - trained, 1), "reload": round(time.monotonic() - exported, 1)},
}
with open(os.path.join(OUTDIR, "chief.json"), "w") as f:
    json.dump(result, f)
print("[ps_memory] done", json.dumps(result["seconds"]), flush=True)
