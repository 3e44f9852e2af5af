"""Click commands that refuse a single-valued option given more than once.

Plain click keeps the last value: ``tfdist tf-config --chief a:2222 --chief b:2222`` would silently
drop ``a``. :class:`StrictCommand` and :class:`StrictGroup` make that a usage error (exit 2) naming
the option. The rule covers every option that is neither ``multiple=True`` nor a counter, flags
included (``--evaluator --evaluator``, ``--json --no-json``): one rule, and a contradictory pair is
never resolved by position. Eager options (``--help``, ``--version``) act at once and are exempt.

    @click.command(cls=StrictCommand)
    @click.option("--chief")
    def cmd(chief): ...
"""
from __future__ import annotations

from collections import Counter

import click


def repeated_options(command: click.Command, ctx: click.Context,
                     args: list[str]) -> list[tuple[click.Option, int]]:
    """The single-valued options that `args` gives more than once, with how often (parsing only)."""
    parser = command.make_parser(ctx)
    _, _, order = parser.parse_args(args=list(args))
    if any(getattr(param, "is_eager", False) for param in order):
        return []  # --help / --version win; they exit before anything else is used
    counts = Counter(param for param in order if isinstance(param, click.Option))
    return [(param, n) for param, n in counts.items() if n > 1 and not param.multiple and not param.count]


def _check(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    if ctx.resilient_parsing:  # shell completion: never fail
        return
    for param, n in repeated_options(command, ctx, args):
        names = " / ".join(f"'{opt}'" for opt in (*param.opts, *param.secondary_opts))
        what = "it is a flag" if param.is_flag else "it takes one value"
        raise click.UsageError(f"Option {names} was given {n} times; {what}; fix: give it once", ctx=ctx)


class StrictCommand(click.Command):
    """A click command whose single-valued options may be given only once (see the module docstring)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _check(self, ctx, args)
        return super().parse_args(ctx, args)


class StrictGroup(click.Group):
    """A click group with the rule of :class:`StrictCommand`; its sub-commands and sub-groups made with
    ``@group.command()`` / ``@group.group()`` are strict too."""

    command_class = StrictCommand
    group_class = type  # sub-groups are of this same class

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _check(self, ctx, args)
        return super().parse_args(ctx, args)
