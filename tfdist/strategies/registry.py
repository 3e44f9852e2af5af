"""Name -> backend class. Each backend module registers itself; nothing matches by substring."""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Callable, TypeVar

from tfdist.errors import ArgumentValueError, TfdistError, with_fix

if TYPE_CHECKING:
    from tfdist.strategies.base import DistributedStrategy

_Backend = TypeVar("_Backend", bound="type[DistributedStrategy]")


class UnknownStrategyError(TfdistError, ValueError):
    """``make_strategy`` was given a name no backend registered."""


class StrategyRegistry:
    """Backends by exact name, in registration order."""

    def __init__(self) -> None:
        self._backends: dict[str, type[DistributedStrategy]] = {}
        self._descriptions: dict[str, str] = {}

    def register(self, name: str, description: str) -> Callable[[_Backend], _Backend]:
        """Class decorator: ``@STRATEGIES.register("horovod", "ring-allreduce ...")``."""
        def decorate(backend: _Backend) -> _Backend:
            if name in self._backends:
                raise ArgumentValueError(f"strategy {name!r} is registered twice; "
                                         "fix: give each backend its own name")
            self._backends[name] = backend
            self._descriptions[name] = description
            backend.kind = name
            return backend
        return decorate

    def names(self) -> list[str]:
        return list(self._backends)

    def description(self, name: str) -> str:
        return self._descriptions[name]

    def get(self, name: str) -> type[DistributedStrategy]:
        """The backend class for ``name``; unknown names fail with the list and a close match."""
        try:
            return self._backends[name]
        except (KeyError, TypeError):
            pass
        known = ["auto", *sorted(self._backends)]
        close = difflib.get_close_matches(str(name), known, n=1)
        fix = f"did you mean {close[0]!r}?" if close else "pick one of the known strategies"
        raise UnknownStrategyError(with_fix(
            f"unknown strategy {name!r}; known strategies: {', '.join(known)}", fix)) from None


STRATEGIES = StrategyRegistry()
