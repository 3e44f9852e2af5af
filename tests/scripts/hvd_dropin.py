"""`import tfdist.horovod as hvd` scenarios for tests/horovod/test_dropin.py, under horovodrun -np 2.

    hvd_dropin.py OUTDIR [--then-mnist MNIST_OUTDIR]
                              (the Keras: tf.keras as TF_USE_LEGACY_KERAS sets it, like Horovod users)

Writes OUTDIR/rank<r>.json with, per scenario:
* equivalence: ranks start from different weights, DistributedOptimizer + BroadcastGlobalVariablesCallback
  + MetricAverageCallback under plain model.fit on a functional model, each rank on its half of every
  global batch; the final weights, the weights of one process trained on the doubled batch from rank
  0's initial weights, and each epoch's raw and averaged logs;
* sequential: the same with a Sequential without Input (built from the first batch, broadcast before
  the first step);
* warmup: the learning rate each batch starts with under LearningRateWarmupCallback;
* trap: identical starting weights, different shards; final weights with Horovod's own
  horovod.tensorflow.keras.DistributedOptimizer and with tfdist.horovod's.
* loop: the same under a GradientTape loop that calls ``apply_gradients`` (issue 34): eagerly, inside
  tf.function and through a LossScaleOptimizer with tfdist.horovod's optimizer, inside tf.function with
  Horovod's own; and one process's weights on the doubled batch.

``--then-mnist MNIST_OUTDIR`` then runs horovod_keras_mnist.py on MNIST_OUTDIR in the same job,
unchanged, as its own ``__main__`` (one horovodrun start-up for both).
"""
import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import tfdist.horovod as hvd
from tfdist.keras_compat import flavour_of

K = tf.keras
BATCH, STEPS, EPOCHS = 8, 4, 3


def functional_model(seed: int):
    K.utils.set_random_seed(seed)
    inputs = K.Input(shape=(5,))
    hidden = K.layers.Dense(6, activation="tanh")(inputs)
    model = K.Model(inputs, K.layers.Dense(1)(hidden))
    return model


def sequential_model(seed: int):
    """No Input: built inside the first training step unless the broadcast callback builds it first."""
    K.utils.set_random_seed(seed)
    return K.Sequential([K.layers.Dense(6, activation="tanh"), K.layers.Dense(1)])


def data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2 * BATCH * STEPS, 5)).astype("float32")
    y = (x @ rng.normal(size=(5, 1)) + 0.1).astype("float32")
    return x, y


def shard(array, rank: int):
    """This rank's half of every global batch of 2*BATCH rows, in step order."""
    blocks = array.reshape(STEPS, 2, BATCH, *array.shape[1:])
    return blocks[:, rank].reshape(STEPS * BATCH, *array.shape[1:])


def weights(model) -> list:
    return [np.asarray(w).tolist() for w in model.get_weights()]


class Record(K.callbacks.Callback):
    """Copies of the epoch logs and the learning rate each batch starts with."""

    def __init__(self):
        super().__init__()
        self.epochs, self.rates = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.rates.append(float(np.asarray(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append({k: float(v) for k, v in (logs or {}).items()})


def equivalence(rank: int, build=functional_model) -> dict:
    x, y = data()
    model = build(seed=100 + rank)  # different weights on each rank
    initial = weights(model) if model.built else None
    model.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(0.05)), loss="mse", metrics=["mae"])
    raw, averaged = Record(), Record()
    model.fit(shard(x, rank), shard(y, rank), batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw,
                         hvd.callbacks.MetricAverageCallback(), averaged])
    reference = build(seed=100)  # rank 0's initial weights, one process, doubled batch
    reference.compile(optimizer=K.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    reference.fit(x, y, batch_size=2 * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return {"initial": initial, "final": weights(model), "reference": weights(reference),
            "raw_logs": raw.epochs, "averaged_logs": averaged.epochs,
            "optimizer_class": type(model.optimizer).__name__}


def warmup(rank: int) -> dict:
    x, y = data()
    model = functional_model(seed=1)
    model.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.Adam(0.1)), loss="mse")
    record = Record()
    model.fit(shard(x, rank), shard(y, rank), batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=2), record])
    return {"rates": record.rates, "steps": STEPS, "epochs": EPOCHS, "warmup_epochs": 2, "initial_lr": 0.1}


def trap(rank: int) -> dict:
    import horovod.tensorflow.keras as horovod_keras

    x, y = data()
    out = {}
    for name, wrap in (("horovod", horovod_keras.DistributedOptimizer), ("tfdist", hvd.DistributedOptimizer)):
        model = functional_model(seed=3)  # identical starting weights on every rank
        model.compile(optimizer=wrap(K.optimizers.SGD(0.05)), loss="mse")
        model.fit(shard(x, rank), shard(y, rank), batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
        out[name] = weights(model)
    return out


def loop(rank: int) -> dict:
    import horovod.tensorflow.keras as horovod_keras

    x, y = data()
    xs, ys = shard(x, rank), shard(y, rank)

    def train(wrap, mode: str) -> list:
        model = functional_model(seed=5)  # identical starting weights on every rank
        inner = K.optimizers.SGD(0.05)
        scaled = mode == "loss_scale"
        optimizer = wrap(K.mixed_precision.LossScaleOptimizer(inner) if scaled else inner)
        legacy_scaling = scaled and flavour_of(optimizer) == "tf_keras"  # Keras 3 unscales in apply

        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
                if scaled:
                    loss = optimizer.get_scaled_loss(loss) if legacy_scaling else optimizer.scale_loss(loss)
            grads = tape.gradient(loss, model.trainable_variables)
            if legacy_scaling:
                grads = optimizer.get_unscaled_gradients(grads)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

        run = step if mode == "eager" else tf.function(step)
        for _ in range(EPOCHS):
            for i in range(STEPS):
                run(xs[i * BATCH:(i + 1) * BATCH], ys[i * BATCH:(i + 1) * BATCH])
        return weights(model)

    reference = functional_model(seed=5)
    reference.compile(optimizer=K.optimizers.SGD(0.05), loss="mse")
    reference.fit(x, y, batch_size=2 * BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    out = {mode: train(hvd.DistributedOptimizer, mode) for mode in ("eager", "function", "loss_scale")}
    out["horovod"] = train(horovod_keras.DistributedOptimizer, "function")
    out["reference"] = weights(reference)
    return out


def main() -> None:
    outdir = Path(sys.argv[1])
    hvd.init()
    rank = hvd.rank()
    result = {"rank": rank, "size": hvd.size(), "flavour": flavour_of(K.optimizers.SGD()),
              "equivalence": equivalence(rank),
              "sequential": equivalence(rank, sequential_model), "warmup": warmup(rank), "trap": trap(rank),
              "loop": loop(rank),
              "allreduce": np.asarray(hvd.allreduce(np.array([rank + 1.0]), op=hvd.Sum)).tolist()}
    (outdir / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    if len(sys.argv) == 4 and sys.argv[2] == "--then-mnist":
        import runpy

        sys.argv = [str(Path(__file__).with_name("horovod_keras_mnist.py")), sys.argv[3]]
        runpy.run_path(sys.argv[0], run_name="__main__")
    elif len(sys.argv) != 2:
        raise SystemExit(f"usage: hvd_dropin.py OUTDIR [--then-mnist MNIST_OUTDIR], got {sys.argv[1:]}")
