"""tf.distribute ParameterServerStrategy (written in the next step)."""
from __future__ import annotations

from tfdist.strategies.base import DistributedStrategy
from tfdist.strategies.registry import STRATEGIES


@STRATEGIES.register("parameter_server",
                     "tf.distribute ParameterServerStrategy: coordinator, workers and ps tasks")
class ParameterServerStrategy(DistributedStrategy):
    def __init__(self, options) -> None:
        raise NotImplementedError("parameter_server is not implemented yet")
