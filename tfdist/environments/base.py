"""The small interface every environment detector implements."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Mapping

from tfdist.errors import TfdistError, with_fix


class EnvironmentVariableError(TfdistError, ValueError):
    """A launcher variable tfdist reads is missing or malformed."""


@dataclass(frozen=True)
class Selection:
    """The strategy ``auto`` resolves to, the rule that chose it (for logs and errors), and the
    environment detected on the way, which ``make_strategy`` hands to the backend it builds."""

    kind: str
    reason: str
    environment: ClusterEnvironment | None = field(default=None, compare=False, repr=False)


class ClusterEnvironment:
    """Where this process runs, read from a snapshot of environment variables.

    Subclasses implement ``detect`` (does this environment apply?) and the rank/size accessors.
    Nothing here writes to the environment.
    """

    name: ClassVar[str] = "base"

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = dict(environ)

    @staticmethod
    def detect(environ: Mapping[str, str]) -> bool:
        raise NotImplementedError

    def applies(self) -> bool:
        """``detect`` on the variables this environment was built from (detectors that parse a
        variable answer from the copy they keep, so it is read once)."""
        return self.detect(self._environ)

    @property
    def environ(self) -> Mapping[str, str]:
        """The snapshot of environment variables this environment was read from."""
        return dict(self._environ)

    def auto_strategy(self, gpu_count: int) -> Selection | None:
        """The strategy ``make_strategy("auto")`` picks here, or ``None`` to ask the next detector."""
        return None

    @property
    def rank(self) -> int:
        """This process's global index (0 for the chief or coordinator)."""
        return 0

    @property
    def size(self) -> int:
        """How many training processes the launcher started."""
        return 1

    @property
    def local_rank(self) -> int:
        """This process's index among the processes on its host."""
        return 0

    def describe(self) -> dict[str, object]:
        """A JSON-ready summary for ``tfdist env``."""
        return {"name": self.name, "rank": self.rank, "size": self.size, "local_rank": self.local_rank}


def int_variable(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    """Read an integer environment variable, with an error naming it when it is malformed."""
    raw = environ.get(name)
    if raw is None:
        if default is None:
            raise EnvironmentVariableError(with_fix(f"environment variable {name} is not set",
                                                    "start the process with the launcher that sets it"))
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise EnvironmentVariableError(f"environment variable {name}={raw!r} is not an integer; "
                         f"fix the launcher that sets it or unset it") from None
