"""The strategy ``make_strategy`` built last: the one source of who is chief and how many replicas.

Callbacks ask it instead of reading launcher variables again (accelerate's ``PartialState`` and
tf-keras asking its distribution strategy follow the same idea). Importing this module does not
import TensorFlow.
"""
from __future__ import annotations

from typing import Protocol


class RunningStrategy(Protocol):
    """What the callbacks ask of the strategy (``tfdist.strategies.DistributedStrategy`` has it all)."""

    kind: str

    @property
    def rank(self) -> int: ...

    @property
    def is_chief(self) -> bool: ...

    @property
    def num_workers(self) -> int: ...

    @property
    def num_replicas_in_sync(self) -> int: ...


_current: RunningStrategy | None = None


def set_current(strategy: RunningStrategy | None) -> None:
    """Make ``strategy`` the one the callbacks ask (``make_strategy`` calls this)."""
    global _current
    _current = strategy


def current_strategy() -> RunningStrategy | None:
    """The strategy ``make_strategy`` returned last in this process, or ``None``."""
    return _current
