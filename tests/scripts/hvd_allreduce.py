"""Run under horovodrun: every rank contributes rank+1; rank 0 prints the allreduced sum."""
import tfdist  # noqa: F401  (Keras 2 routing before TensorFlow)

import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
total = hvd.allreduce(tf.constant([float(hvd.rank() + 1), 10.0]), op=hvd.Sum, name="sum")
print(f"rank={hvd.rank()} size={hvd.size()} sum={total.numpy().tolist()}", flush=True)
