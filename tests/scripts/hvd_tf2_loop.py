"""Horovod's examples/tensorflow2/tensorflow2_mnist.py (a GradientTape loop on Horovod's TF2 API), shaped
the same, on tfdist.horovod; for tests/horovod/test_tf2_loop.py.

    horovodrun -np 2 -H localhost:2 --gloo python hvd_tf2_loop.py OUTDIR

Kept from Horovod's example: `hvd.init()`, the GPU pinning, a `tf.data` pipeline, a `Sequential` without
`Input` (built inside the first step), the `tf.function` training step with `hvd.DistributedGradientTape`,
`hvd.broadcast_variables` of the model's and the optimizer's variables after the first batch, the
learning rate scaled by `hvd.size()`, the checkpoint on rank 0. Changed: `import tfdist.horovod as hvd`;
the Keras is `tf.keras` with TF_USE_LEGACY_KERAS=1 (tf-keras) and `import keras` otherwise (Keras 3), as
users of each write it; `opt.variables` in place of `opt.variables()` (a list on Keras 3, where calling it
raises TypeError; tf-keras optimizers take both). For a result that one process can reproduce exactly:
the 8x8 digits shipped with tfdist in a fixed order, where each step's global batch of 2*BATCH rows is
split between the ranks (rank r takes half r), in place of MNIST shuffled per rank; no Dropout (its masks
are random); SGD with momentum in place of Adam (which divides by the gradients' size, so that float
noise in a near-zero gradient moves a weight by a whole step); STEPS steps; each rank starts from its own
seed (SEED + rank), so only the broadcast makes the ranks one. Added: `hvd.allreduce` of the loss inside
the step, and a few collectives on tensors inside `tf.function` after the loop.

Then, in the same job, examples/custom_loop.py's loop on tfdist's strategy object (``tfdist_loop``).

Rank r writes OUTDIR/rank<r>.json: its local and averaged loss per step, its final weights, the results of
the collectives; rank 0 also the weights of one process without Horovod running the same steps (see
`one_process`), and the checkpoint OUTDIR/checkpoint-1.*.
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import tfdist.horovod as hvd
from tfdist.datasets import load_digits

if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    keras = tf.keras  # tf-keras, as Horovod's examples use it
else:
    import keras  # Keras 3

STEPS, BATCH, SEED, LEARNING_RATE = 100, 32, 100, 0.02


def global_batches(size: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """The digits in one fixed order, repeated: (STEPS, size*BATCH, 8, 8, 1) images, (STEPS, size*BATCH) labels."""
    digits = load_digits()
    order = np.random.default_rng(7).permutation(len(digits.target))
    order = np.resize(order, STEPS * size * BATCH)
    images = (digits.images[order] / 16.0).astype("float32").reshape(STEPS, size * BATCH, 8, 8, 1)
    return images, digits.target[order].reshape(STEPS, size * BATCH)


def build_model(seed: int):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.layers.Conv2D(8, [3, 3], activation='relu'),
        keras.layers.Conv2D(16, [3, 3], activation='relu'),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation='relu'),
        keras.layers.Dense(10, activation='softmax')
    ])


def weights(model) -> list:
    return [np.asarray(w).tolist() for w in model.get_weights()]


def train(outdir: Path) -> None:
    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process)
    gpus = tf.config.experimental.list_physical_devices('GPU')
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

    images, labels = global_batches(hvd.size())
    mine = slice(hvd.rank() * BATCH, (hvd.rank() + 1) * BATCH)  # this rank's half of every global batch
    dataset = tf.data.Dataset.from_tensor_slices(
        (images[:, mine].reshape(-1, 8, 8, 1), tf.cast(labels[:, mine].reshape(-1), tf.int64))
    )
    dataset = dataset.batch(BATCH)

    mnist_model = build_model(SEED + hvd.rank())  # different weights on each rank until the broadcast
    loss = keras.losses.SparseCategoricalCrossentropy()

    # Horovod: adjust learning rate based on number of GPUs.
    opt = keras.optimizers.SGD(LEARNING_RATE * hvd.size(), momentum=0.9)

    checkpoint = tf.train.Checkpoint(model=mnist_model, optimizer=opt)

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            probs = mnist_model(images, training=True)
            loss_value = loss(labels, probs)

        # Horovod: add Horovod Distributed GradientTape.
        tape = hvd.DistributedGradientTape(tape)

        grads = tape.gradient(loss_value, mnist_model.trainable_variables)
        opt.apply_gradients(zip(grads, mnist_model.trainable_variables))

        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        # Note: broadcast should be done after the first gradient step to ensure optimizer
        # initialization.
        if first_batch:
            hvd.broadcast_variables(mnist_model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)

        # The loss averaged over the ranks, for the log (an allreduce on a symbolic tensor).
        average_loss = hvd.allreduce(loss_value)
        return loss_value, average_loss

    losses, averaged = [], []
    for batch, (images_batch, labels_batch) in enumerate(dataset.take(STEPS)):
        loss_value, average_loss = training_step(images_batch, labels_batch, batch == 0)
        losses.append(float(loss_value))
        averaged.append(float(average_loss))
        if batch % 10 == 0 and hvd.local_rank() == 0:
            print('Step #%d\tLoss: %.6f' % (batch, average_loss))

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting it.
    if hvd.rank() == 0:
        checkpoint.save(str(outdir / "checkpoint"))

    result = {"rank": hvd.rank(), "size": hvd.size(), "keras": keras.__name__.split(".")[0],
              "losses": losses, "averaged_losses": averaged, "weights": weights(mnist_model),
              "collectives": collectives(hvd.rank())}
    if hvd.rank() == 0:
        result["one_process"] = one_process(images, labels)
    (outdir / f"rank{hvd.rank()}.json").write_text(json.dumps(result))


def collectives(rank: int) -> dict:
    """tfdist.horovod's allgather, broadcast and allreduce on a symbolic tensor inside tf.function."""
    @tf.function
    def run(value):
        return hvd.allgather(value), hvd.broadcast(value, root_rank=1), hvd.allreduce(value, op=hvd.Sum)

    gathered, broadcast, summed = run(tf.constant([rank + 1.0]))
    return {"allgather": gathered.numpy().tolist(), "broadcast": broadcast.numpy().tolist(),
            "allreduce_sum": summed.numpy().tolist()}


def one_process(images: np.ndarray, labels: np.ndarray) -> list:
    """The job's steps in one process, without Horovod: each global batch whole, at the job's learning
    rate (the gradient of its mean loss is the mean of the two halves' gradients). The first step is the
    example's: each rank's gradient at its own initial weights, averaged, applied to rank 0's weights
    (which the broadcast after it gives every rank)."""
    loss = keras.losses.SparseCategoricalCrossentropy()

    def built(seed: int, x: np.ndarray):
        model = build_model(seed)
        model(x)  # built right after seeding, as the job's first step builds it
        return model

    def gradients(model, x, y):
        with tf.GradientTape() as tape:
            loss_value = loss(y, model(x, training=True))
        return tape.gradient(loss_value, model.trainable_variables)

    first, second = slice(0, BATCH), slice(BATCH, 2 * BATCH)
    model = built(SEED, images[0, first])
    rank1 = built(SEED + 1, images[0, second])
    opt = keras.optimizers.SGD(LEARNING_RATE * 2, momentum=0.9)
    mean = [(a + b) / 2 for a, b in zip(gradients(model, images[0, first], labels[0, first]),
                                        gradients(rank1, images[0, second], labels[0, second]))]
    opt.apply_gradients(zip(mean, model.trainable_variables))

    @tf.function
    def step(x, y):
        opt.apply_gradients(zip(gradients(model, x, y), model.trainable_variables))

    for i in range(1, STEPS):
        step(images[i], labels[i])
    return weights(model)


LOOP_EPOCHS, LOOP_BATCH, LOOP_LR = 2, 32, 0.1


def tfdist_loop(outdir: Path) -> None:
    """examples/custom_loop.py's loop on the tfdist strategy object (``make_strategy("horovod")``), in the same
    job: trained with a checkpoint in OUTDIR/loop-ckpt (rank 0 writes it), run again to resume from it, and
    under mixed_float16 (Keras 3 trains it; tf-keras is refused), a short loop driving ``strategy.callbacks``
    with tfdist's per-worker figures (``logged``), and (rank 0) the float32 loop under ``single``
    on the global batch at the learning rate the ranks scaled to.
    Rank r writes OUTDIR/loop-rank<r>.json."""
    import importlib.util

    import tfdist

    spec = importlib.util.spec_from_file_location(
        "custom_loop", Path(__file__).resolve().parents[2] / "examples" / "custom_loop.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    strategy = tfdist.make_strategy("horovod")
    checkpoints = outdir / "loop-ckpt"
    model, history, step, start = example.train(strategy, keras, LOOP_EPOCHS, LOOP_BATCH, LOOP_LR, str(checkpoints))
    result = {"kind": strategy.kind, "size": strategy.size, "keras": type(model).__module__.split(".")[0], "start": start, "weights": weights(model),
              "losses": [h["loss"] for h in history], "tracing": step.experimental_get_tracing_count()}
    _, rerun, _, result["rerun_start"] = example.train(tfdist.make_strategy("horovod"), keras, LOOP_EPOCHS,
                                                       LOOP_BATCH, LOOP_LR, str(checkpoints))
    result["rerun_epochs"] = len(rerun)
    keras.mixed_precision.set_global_policy("mixed_float16")  # Keras 3 trains it, tf-keras is refused
    try:
        mixed, mixed_history, _, _ = example.train(tfdist.make_strategy("horovod"), keras, LOOP_EPOCHS, LOOP_BATCH,
                                                   LOOP_LR)
        result["mixed"] = {"losses": [h["loss"] for h in mixed_history], "weights": weights(mixed)}
    except tfdist.TfdistError as exc:
        result["mixed"] = f"{type(exc).__name__}: {exc}"
    finally:
        keras.mixed_precision.set_global_policy("float32")
    sys.path.insert(0, str(Path(__file__).parent))
    from loop_example import logged_loop

    logging_strategy = tfdist.make_strategy("horovod")
    result["logged"] = logged_loop(logging_strategy, keras, 2, LOOP_BATCH, LOOP_LR,
                                   logging_strategy.metrics(LOOP_BATCH, show_workers=True))
    if strategy.rank == 0:
        single = tfdist.make_strategy("single")
        reference, reference_history, _, _ = example.train(single, keras, LOOP_EPOCHS, LOOP_BATCH * strategy.size,
                                                           LOOP_LR * strategy.size, log=lambda line: None)
        result["one_process"] = weights(reference)
        result["one_process_losses"] = [h["loss"] for h in reference_history]
    (outdir / f"loop-rank{strategy.rank}.json").write_text(json.dumps(result))


if __name__ == '__main__':
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: hvd_tf2_loop.py OUTDIR, got {sys.argv[1:]}")
    train(Path(sys.argv[1]))
    tfdist_loop(Path(sys.argv[1]))
