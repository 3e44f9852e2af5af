"""The strategy ``make_strategy`` built last: the one source of who is chief and how many replicas.

Callbacks ask it instead of reading launcher variables again (accelerate's ``PartialState`` and
tf-keras asking its distribution strategy follow the same idea). Importing this module does not
import TensorFlow.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tfdist.strategies.base import DistributedStrategy

_current: "DistributedStrategy | None" = None


def set_current(strategy: "DistributedStrategy | None") -> None:
    """Make ``strategy`` the one the callbacks ask (``make_strategy`` calls this)."""
    global _current
    _current = strategy


def current_strategy() -> "DistributedStrategy | None":
    """The strategy ``make_strategy`` returned last in this process, or ``None``."""
    return _current
