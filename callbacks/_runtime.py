"""What the callbacks need to know about the running job, without importing Horovod needlessly."""
from __future__ import annotations

import os
import sys
from types import ModuleType

from tfdist.environments import HorovodRunEnvironment, TFConfigEnvironment


def horovod() -> ModuleType | None:
    """``horovod.tensorflow`` when it was imported and initialised in this process, else ``None``."""
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None or not hvd.is_initialized():
        return None
    return hvd


def world_size() -> int:
    """Horovod's size, or 1 outside Horovod (tf.distribute reduces inside the step)."""
    hvd = horovod()
    return hvd.size() if hvd else 1


def replicas(model) -> int:
    """Replicas that step together: Horovod's size, else the model's tf.distribute replicas."""
    hvd = horovod()
    if hvd is not None:
        return hvd.size()
    strategy = getattr(model, "distribute_strategy", None)
    return int(getattr(strategy, "num_replicas_in_sync", 1) or 1)


def is_chief() -> bool:
    """Rank 0 under Horovod; the chief (or worker 0 without a chief) under TF_CONFIG; else True."""
    hvd = horovod()
    if hvd is not None:
        return hvd.rank() == 0
    if HorovodRunEnvironment.detect(os.environ):  # horovodrun started us; hvd.init() comes later
        return HorovodRunEnvironment(os.environ).rank == 0
    if TFConfigEnvironment.detect(os.environ):
        return TFConfigEnvironment(os.environ).is_chief
    return True
