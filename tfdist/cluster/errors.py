"""The error types of :mod:`tfdist.cluster`: one :class:`Problem` per wrong field."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tfdist.cluster.limits import MAX_LISTED
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


def shown_path(path: str, limit: int = MAX_ECHO) -> str:
    """``repr(path)``, cut in the middle when long: a path's end names the file, so it is kept.

    >>> shown_path("/tmp/" + "d" * 100 + "/file.txt/plan.json", limit=40)
    "'/tmp/dddd...ddddddd/file.txt/plan.json' (124 characters)"
    """
    text = repr(path)
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head - 3
    return f"{text[:head]}...{text[-tail:]} ({len(path)} characters)"


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

    @property
    def details(self) -> str:
        """Every problem's message and fix, without the fields, on one line (for callers that name the
        field themselves)."""
        return " ".join(p.detail for p in self.problems)


class ClusterOptionError(TfdistError, ValueError):
    """The options describing a cluster (addresses, a file, the shorthand) are wrong.

    ``option`` is the one to blame (``"--hosts"``), or None when it is their combination; the message
    ends with the fix. ``problems``: the underlying problems, when a file or a count had them.

    >>> str(ClusterOptionError("--hosts", "the shorthand needs hosts; fix: --hosts node1,node2"))
    'the shorthand needs hosts; fix: --hosts node1,node2'
    """

    def __init__(self, option: str | None, message: str, problems: Iterable[Problem] = ()) -> None:
        super().__init__(message)
        self.option = option
        self.problems: list[Problem] = list(problems)


def listing(problems: Iterable[Any], limit: int = MAX_LISTED) -> str:
    """After a ``...:`` lead-in: one problem on the same line, several as an indented list of at most
    `limit` (then how many more).

    >>> listing(["a: x"]), listing(["a: x", "b: y"])
    (' a: x', '\\n  a: x\\n  b: y')
    """
    problems = list(problems.problems if isinstance(problems, (ClusterConfigError, ClusterOptionError))
                    else problems)
    if len(problems) == 1:
        return f" {problems[0]}"
    lines = [f"  {p}" for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"  ... and {len(problems) - limit} more (fix the ones above first)")
    return "\n" + "\n".join(lines)
