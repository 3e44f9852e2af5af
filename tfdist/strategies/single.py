"""One process, one device: the default tf.distribute strategy."""
from __future__ import annotations

import tensorflow as tf

from tfdist.strategies.base import DistributedStrategy
from tfdist.strategies.registry import STRATEGIES


@STRATEGIES.register("single", "one process on the default device (no distribution)")
class SingleStrategy(DistributedStrategy):
    """The script as it runs without tfdist; ``scope()`` is TensorFlow's default strategy."""

    @property
    def tf_strategy(self) -> tf.distribute.Strategy:
        return tf.distribute.get_strategy()

    @property
    def lr_scale(self) -> float:
        return 1.0
