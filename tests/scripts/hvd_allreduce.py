"""Run under horovodrun: every rank contributes rank+1; rank 0 prints the allreduced sum.

Then each rank wraps a tf-keras optimizer as users do (``tfdist.horovod.DistributedOptimizer``, with
``groups`` so that Horovod's own wrapper is the one made, and ``strategy.optimizer``), trains one step,
and prints the wrappers' classes and whether Keras 3 was imported (``keras3=``): a tf-keras rank never
uses it.
"""
import sys

import tfdist  # noqa: F401  (Keras 2 routing before TensorFlow)

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
import tf_keras

import tfdist.horovod as tfdist_hvd

hvd.init()
total = hvd.allreduce(tf.constant([float(hvd.rank() + 1), 10.0]), op=hvd.Sum, name="sum")
print(f"rank={hvd.rank()} size={hvd.size()} sum={total.numpy().tolist()}", flush=True)

strategy = tfdist.make_strategy("horovod")
wrapped = []
for make in (lambda: tfdist_hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1), groups=1),
             lambda: strategy.optimizer(tf_keras.optimizers.SGD(0.1))):
    model = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(2,))])
    optimizer = make()
    model.compile(optimizer=optimizer, loss="mse")
    model.train_on_batch(np.ones((4, 2), "float32"), np.ones((4, 1), "float32"))
    wrapped.append(f"{type(optimizer).__module__}.{type(optimizer).__name__}")
print(f"rank={hvd.rank()} optimizers={','.join(wrapped)} keras3={'keras.src' in sys.modules}", flush=True)
