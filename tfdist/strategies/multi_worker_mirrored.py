"""Synchronous replicas across machines (tf.distribute.MultiWorkerMirroredStrategy, TF_CONFIG)."""
from __future__ import annotations

import dataclasses
import os
from typing import Literal

import tensorflow as tf

from tfdist.environments import TFConfigEnvironment
from tfdist.environments.tf_config import TF_CONFIG
from tfdist.strategies.cluster_config import checked_tf_config
from tfdist.strategies.base import DistributedStrategy, StrategyOptions
from tfdist.strategies.registry import STRATEGIES

_IMPLEMENTATIONS = {"auto": "AUTO", "ring": "RING", "nccl": "NCCL"}


@dataclasses.dataclass(frozen=True)
class MultiWorkerMirroredOptions(StrategyOptions):
    """communication: collective implementation, "auto", "ring" (gRPC) or "nccl"."""

    communication: Literal["auto", "ring", "nccl"] = "auto"

    def __post_init__(self) -> None:
        if self.communication not in _IMPLEMENTATIONS:
            raise ValueError(f"`communication` must be one of {sorted(_IMPLEMENTATIONS)}, "
                             f"got {self.communication!r}; fix: leave it at 'auto' unless you know "
                             "the collective you need")


@STRATEGIES.register("multi_worker_mirrored",
                     "tf.distribute.MultiWorkerMirroredStrategy across the workers of TF_CONFIG")
class MultiWorkerMirroredStrategy(DistributedStrategy):
    """Every TF_CONFIG worker runs the same script; collectives keep replicas in sync.

    Keras' ModelCheckpoint, BackupAndRestore and TensorBoard already write on the chief only
    under this strategy (others write to temporary directories), so tfdist adds nothing there.
    """

    Options = MultiWorkerMirroredOptions
    options: MultiWorkerMirroredOptions

    def __init__(self, options: MultiWorkerMirroredOptions) -> None:
        super().__init__(options)
        if os.environ.get(TF_CONFIG, "").strip():
            checked_tf_config(os.environ[TF_CONFIG])
        self._environment = TFConfigEnvironment(os.environ)
        implementation = getattr(tf.distribute.experimental.CommunicationImplementation,
                                 _IMPLEMENTATIONS[options.communication])
        self._strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=implementation))

    @property
    def tf_strategy(self) -> tf.distribute.Strategy:
        return self._strategy

    @property
    def rank(self) -> int:
        return self._environment.rank

    @property
    def num_workers(self) -> int:
        return max(1, self._environment.size)

    @property
    def is_chief(self) -> bool:
        return self._environment.is_chief
