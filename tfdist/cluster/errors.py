"""The error types of :mod:`tfdist.cluster`: one :class:`Problem` per wrong field."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tfdist.errors import ArgumentValueError, TfdistError, with_fix

#: Longest echo of a user's value in a message; longer values are cut (hostile input can be 1 MiB).
MAX_ECHO = 80


def shown(value: Any, limit: int = MAX_ECHO) -> str:
    """``repr(value)``, cut to about `limit` characters so one message stays one readable line.

    >>> shown("a" * 200, limit=20)
    "'aaaaaaaaaaaaaaaa... (200 characters)"
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 18:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"  # repr may refuse it
    if isinstance(value, (str, int, float, bool, type(None))):
        text = repr(value)
    else:  # a collection: never walk it whole (it may be huge or deeply nested)
        kind = type(value).__name__
        return f"{kind} of {len(value)} items" if hasattr(value, "__len__") else kind
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[: limit - 3] + "..." + size


def field_name(prefix: str, key: Any) -> str:
    """``prefix.key`` when `key` is a short printable string, else ``prefix[<key echoed>]`` (one line)."""
    if isinstance(key, str) and key.isprintable() and 0 < len(key) <= 40:
        return f"{prefix}.{key}"
    return f"{prefix}[{shown(key, limit=40)}]"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a cluster or TF_CONFIG: where, what, and how to fix it.

    >>> str(Problem("worker[1]", "'h:0' has port 0; ports are 1-65535", "use a port between 1 and 65535"))
    "worker[1]: 'h:0' has port 0; ports are 1-65535; fix: use a port between 1 and 65535"
    """

    field: str
    message: str
    fix: str

    @property
    def detail(self) -> str:
        """The message and the fix in the house wording, without the field (for callers that name it)."""
        return with_fix(self.message, self.fix)

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"


class ClusterConfigError(TfdistError, ValueError):
    """A cluster or TF_CONFIG is invalid; ``problems`` lists every reason."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems: list[Problem] = list(problems)
        if not self.problems:
            raise ArgumentValueError("ClusterConfigError needs at least one Problem; "
                                     "fix: pass the problems found")
        if len(self.problems) == 1:
            text = str(self.problems[0])
        else:
            text = f"{len(self.problems)} problems:\n" + "\n".join(f"  {p}" for p in self.problems)
        super().__init__(text)
