"""PowerSGD's error feedback made equal on every worker at each epoch's end (issue 38).

Each Horovod rank, or each MultiWorkerMirrored worker, keeps what compression lost of its own
gradients; only their mean enters later steps (:meth:`tfdist.runtime.powersgd.PowerSGD.synchronize`).
Averaged before any callback that writes a checkpoint (``strategy.fit`` puts this one first), the
chief's checkpoint holds the whole state, and a run resumed from it (a backup, an adaptive switch)
continues exactly. It costs one plain allreduce of the compressed matrices an epoch.
"""
from __future__ import annotations

from typing import Any

import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist.runtime import collective_powersgd
from tfdist.runtime.allreduce import synchronize_powersgd


class SynchronizePowerSGD(tf_keras.callbacks.Callback):
    """At each epoch's end, every worker's PowerSGD errors become their mean (a no-op without PowerSGD).

    ``tf_strategy``: the ``tf.distribute.MultiWorkerMirroredStrategy`` whose collectives average them
    (``make_strategy("multi_worker_mirrored", compression="powersgd")``); None: Horovod's allreduce."""

    def __init__(self, tf_strategy: Any = None) -> None:
        super().__init__()
        self.tf_strategy = tf_strategy

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.tf_strategy is not None:
            collective_powersgd.synchronize_powersgd(self.model.optimizer, self.tf_strategy)
        else:
            synchronize_powersgd(self.model.optimizer)
