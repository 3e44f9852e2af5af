"""Synchronous replicas on the GPUs of one machine (tf.distribute.MirroredStrategy)."""
from __future__ import annotations

import dataclasses

import tensorflow as tf

from tfdist.environments import ClusterEnvironment
from tfdist.strategies.base import DistributedStrategy, StrategyOptions
from tfdist.strategies.options import require_strings
from tfdist.strategies.registry import STRATEGIES


@dataclasses.dataclass(frozen=True)
class MirroredOptions(StrategyOptions):
    """devices: device names to mirror over (default: every local GPU, else the CPU)."""

    devices: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        require_strings("devices", self.devices)


@STRATEGIES.register("mirrored", "tf.distribute.MirroredStrategy over the local GPUs")
class MirroredStrategy(DistributedStrategy):
    """One process, one replica per local GPU, all-reduce inside the step."""

    Options = MirroredOptions
    options: MirroredOptions

    def __init__(self, options: MirroredOptions, environment: ClusterEnvironment | None = None) -> None:
        super().__init__(options, environment)
        devices = list(options.devices) if options.devices else None
        self._strategy = tf.distribute.MirroredStrategy(devices=devices)

    @property
    def tf_strategy(self) -> tf.distribute.Strategy:
        return self._strategy
