"""Horovod's Keras example (examples/tensorflow2/tensorflow2_keras_mnist.py) ported to tfdist.

    python examples/porting_from_horovod.py                                   # one process
    horovodrun -np 2 -H localhost:2 python examples/porting_from_horovod.py   # 2 Horovod ranks

docs/horovod.md, "Porting from Horovod", maps each Horovod line to its replacement here. The model,
optimizer, batch size, warm-up and checkpoint are Horovod's; the 8x8 digits shipped with tfdist stand in
for MNIST so that it runs offline, and 20% of them are held out for the result line.
"""
from __future__ import annotations

import argparse
import os

import tfdist  # before tensorflow; replaces `import horovod.tensorflow.keras as hvd`

import tensorflow as tf

from tfdist.datasets import load_digits  # the 8x8 digits, shipped with tfdist

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--epochs", type=int, default=24)
parser.add_argument("--checkpoint-dir", default=".", help="where rank 0 writes checkpoint-{epoch}.h5")
args = parser.parse_args()

digits = load_digits()
x, y = (digits.images / 16.0).astype("float32")[..., None], digits.target.astype("int64")
split = int(0.8 * len(x))
(x_train, y_train), (x_test, y_test) = (x[:split], y[:split]), (x[split:], y[split:])

strategy = tfdist.make_strategy("auto", warmup_epochs=3)  # hvd.init(), GPU pinning, LR warm-up
with strategy.scope():
    model = tf.keras.Sequential([  # no Input, as in Horovod's example: built from the first batch
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Conv2D(64, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    optimizer = strategy.optimizer(tf.keras.optimizers.Adam(0.001))  # x size, DistributedOptimizer
    target_lr = tf.keras.backend.get_value(optimizer.learning_rate)  # where the warm-up ends
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(), optimizer=optimizer,
                  metrics=["accuracy"])

checkpoint = tf.keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.h5"))
strategy.fit(model, x_train, y_train, batch_size=128, epochs=args.epochs, callbacks=[checkpoint], verbose=1)

results = strategy.evaluate(model, x_test, y_test, batch_size=128, verbose=0, return_dict=True)
if strategy.is_chief:
    print(f"RESULT strategy={strategy.kind} workers={strategy.num_workers} "
          f"learning_rate={target_lr:.6g} "
          f"test_accuracy={results['accuracy']:.4f} test_loss={results['loss']:.4f}", flush=True)
