"""Short ``--help`` pages: an option whose help line leaves out the accepted range.

click appends ``[1<=x<=10000]`` to the help of every range-typed option, which doubles the length of
a page such as ``tfdist launch --help``. The range is not lost: a value outside it is refused with a
message that names the range and the fix (:mod:`tfdist.cli.types`).

    @click.option("--workers", cls=BriefOption, type=BoundedInt(1, 10_000), metavar="N", help="Workers.")
"""
from __future__ import annotations

from typing import Any

import click


class BriefOption(click.Option):
    """A click option whose ``--help`` line shows its default but not its range."""

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        extra.pop("range", None)
        return extra
