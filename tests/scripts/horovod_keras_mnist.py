"""Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py, shaped the same, on tfdist.horovod.

    horovodrun -np 2 -H localhost:2 --gloo python horovod_keras_mnist.py OUTDIR

Differences from Horovod's example: `import tfdist.horovod as hvd`; the 8x8 digits shipped with tfdist instead
of downloading MNIST; smaller layers and a few short epochs; rank r writes its final weights to
OUTDIR/weights-<r>.json, and the checkpoints go to OUTDIR. tf.keras is tf-keras with TF_USE_LEGACY_KERAS=1 and Keras 3 without
it, as for any Horovod user; the one other change for Keras 3 is the compile argument (see below).
"""
import json
import os
import sys

import tensorflow as tf

import tfdist.horovod as hvd


def train(outdir):
    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process)
    gpus = tf.config.experimental.list_physical_devices('GPU')
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

    from tfdist.datasets import load_digits
    digits = load_digits()
    images, labels = digits.images, digits.target

    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(images[..., tf.newaxis] / 16.0, tf.float32), tf.cast(labels, tf.int64)))
    dataset = dataset.repeat().shuffle(2000, seed=hvd.rank()).batch(32)

    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(16, [3, 3], activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation='relu'),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation='softmax'),
    ])

    # Horovod: adjust learning rate based on number of workers.
    scaled_lr = 0.001 * hvd.size()
    opt = tf.optimizers.Adam(scaled_lr)

    # Horovod: add Horovod DistributedOptimizer.
    opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=1, average_aggregated_gradients=True)

    if os.environ.get('TF_USE_LEGACY_KERAS') == '1':
        # tf-keras: as in Horovod's example.
        model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt,
                      metrics=['accuracy'], experimental_run_tf_function=False)
    else:
        # Keras 3: compile() has no `experimental_run_tf_function` (the one other change for Keras 3).
        model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=['accuracy'])

    callbacks = [
        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: average metrics among workers at the end of every epoch.
        hvd.callbacks.MetricAverageCallback(),
        # Horovod: warm the learning rate up from scaled_lr / size to scaled_lr.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2, verbose=1),
    ]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(outdir, 'checkpoint-{epoch}.h5')))

    # Horovod: write logs on worker 0.
    verbose = 1 if hvd.rank() == 0 else 0

    # Horovod: adjust number of steps based on number of workers.
    model.fit(dataset, steps_per_epoch=24 // hvd.size(), callbacks=callbacks, epochs=3, verbose=verbose)
    return model


if __name__ == '__main__':
    outdir = sys.argv[1]
    trained = train(outdir)
    with open(os.path.join(outdir, f'weights-{hvd.rank()}.json'), 'w') as out:
        json.dump({'weights': [w.tolist() for w in trained.get_weights()],
                   'keras': type(trained).__module__.split('.')[0]}, out)
