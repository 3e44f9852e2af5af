"""Start every Horovod rank from the same weights and optimizer state."""
from __future__ import annotations

import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import upstream
from tfdist.errors import ArgumentValueError, with_fix
from tfdist.callbacks import _runtime
from tfdist.runtime.allreduce import broadcast_variables


class BroadcastInitialState(tf_keras.callbacks.Callback):
    """Broadcast the model's variables and the optimizer's state from ``root_rank`` before training.

    The optimizer's slots are created first (``optimizer.build``), so that the very first step
    already starts from identical state everywhere. A no-op outside Horovod: tf.distribute
    creates mirrored variables identical by construction. Works with tf-keras and Keras 3 models
    (whose variables wrap the ``tf.Variable`` Horovod broadcasts).
    """

    def __init__(self, root_rank: int = 0) -> None:
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False

    def on_train_begin(self, logs=None) -> None:
        hvd = _runtime.horovod()
        if hvd is None or self.broadcast_done:
            return
        if not self.model.built or not self.model.variables:
            raise ArgumentValueError(with_fix(
                f"model {self.model.name!r} has no weights yet at the start of training, so there is "
                "nothing to broadcast and the ranks would start from different weights",
                "train with strategy.fit (it builds the model from the first batch), or give the "
                "model an input shape (keras.Input) or call model.build() before fit"))
        optimizer = self.model.optimizer
        if optimizer is not None and not upstream.optimizer_is_built(optimizer):
            optimizer.build(self.model.trainable_variables)
        broadcast_variables(self.model.variables, root_rank=self.root_rank)
        if optimizer is not None:
            broadcast_variables(list(optimizer.variables), root_rank=self.root_rank)
        self.broadcast_done = True
