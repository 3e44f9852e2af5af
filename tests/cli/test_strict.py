"""Every command of ``tfdist`` refuses a single-valued option given twice (tfdist.cli.strict).

The commands are found by walking ``tfdist.cli.main.cli``, so a new command or option is covered
without editing this file. ``launch`` fails here until it is declared with ``cls=StrictCommand``.
"""
from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from tfdist.cli.main import cli
from tfdist.cli.strict import StrictCommand, StrictGroup


def _walk(command: click.Command, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1] if path else "tfdist")
        for name in command.list_commands(ctx):
            found += _walk(command.get_command(ctx, name), (*path, name))
    return found


COMMANDS = _walk(cli, ())
CASES = [
    pytest.param(path, command, option, id=" ".join(("tfdist", *path, option.opts[0])))
    for path, command in COMMANDS
    for option in command.params
    if isinstance(option, click.Option) and not option.multiple and not option.count and not option.is_eager
]


def test_the_walk_finds_every_command():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert names >= {"", "env", "launch", "tf-config", "tf-config validate"}
    assert len(CASES) >= 20


def _twice(option: click.Option) -> list[str]:
    """The option given twice, with a harmless value each time (the values are never used)."""
    opt = option.opts[0]
    if option.is_flag:
        return [opt, opt]
    value = ["1"] * option.nargs
    return [opt, *value, opt, *value]


def _required_arguments(command: click.Command) -> list[str]:
    # a path that is no executable and no file, so nothing can start even if parsing succeeded
    return [arg for param in command.params if isinstance(param, click.Argument) and param.required
            for arg in ["/nonexistent/tfdist-test"] * max(param.nargs, 1)]


@pytest.mark.parametrize("path, command, option", CASES)
def test_make_context_refuses_a_repeated_single_valued_option(path, command, option):
    args = [*_twice(option), *_required_arguments(command)]
    with pytest.raises(click.UsageError) as info:
        command.make_context(path[-1] if path else "tfdist", args)
    assert info.value.exit_code == 2
    message = info.value.format_message()
    names, _, rest = message.partition(" was given 2 times; ")
    assert names.startswith("Option ") and f"'{option.opts[0]}'" in names and rest, message
    assert message.endswith("; fix: give it once")


@pytest.mark.parametrize("path, command, option", CASES)
def test_the_cli_exits_2_naming_the_repeated_option(path, command, option):
    args = [*path, *_twice(option), *_required_arguments(command)]
    result = CliRunner().invoke(cli, args, prog_name="tfdist")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert option.opts[0] in error and "was given 2 times" in error


def test_flags_given_twice_or_contradicting_are_refused():
    @click.command(cls=StrictCommand)
    @click.option("--shout/--no-shout", default=False)
    @click.option("-v", "--verbose", count=True)
    @click.option("--tag", multiple=True)
    def cmd(shout: bool, verbose: int, tag: tuple[str, ...]) -> None:
        click.echo(f"{shout} {verbose} {tag}")

    runner = CliRunner()
    result = runner.invoke(cmd, ["--shout", "--no-shout"])
    assert result.exit_code == 2
    expected = "Option '--shout' / '--no-shout' was given 2 times; it is a flag; fix: give it once"
    assert expected in result.output
    ok = runner.invoke(cmd, ["-v", "-v", "--tag", "a", "--tag", "b", "--shout"])  # counters, multiples: fine
    assert (ok.exit_code, ok.output) == (0, "True 2 ('a', 'b')\n")


def test_help_still_wins_and_completion_never_fails():
    result = CliRunner().invoke(cli, ["tf-config", "--chief", "a:1", "--chief", "b:1", "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output
    ctx = cli.make_context("tfdist", ["tf-config", "--format", "json", "--format", "env"],
                           resilient_parsing=True)
    assert ctx.command is cli  # parsed without an error


def test_subcommands_of_a_strict_group_are_strict():
    @click.group(cls=StrictGroup)
    def group() -> None:
        pass

    @group.command()
    @click.option("--x")
    def sub(x: str) -> None:
        pass

    assert isinstance(sub, StrictCommand)
    result = CliRunner().invoke(group, ["sub", "--x", "1", "--x", "2"])
    assert result.exit_code == 2 and "Option '--x' was given 2 times" in result.output
