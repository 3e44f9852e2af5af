"""PowerSGD's error feedback made equal on every Horovod rank at each epoch's end (issue 38).

Each rank keeps what compression lost of its own gradients; only their mean enters later steps
(:meth:`tfdist.runtime.powersgd.PowerSGD.synchronize`). Averaged before any callback that writes a
checkpoint (``strategy.fit`` puts this one first), the chief's checkpoint holds the whole state, and
a run resumed from it (a backup, an adaptive switch) continues exactly. It costs one plain allreduce of
the compressed matrices an epoch.
"""
from __future__ import annotations

import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist.runtime.allreduce import synchronize_powersgd


class SynchronizePowerSGD(tf_keras.callbacks.Callback):
    """At each epoch's end, every rank's PowerSGD errors become their mean (a no-op without PowerSGD)."""

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        synchronize_powersgd(self.model.optimizer)
