"""``tfdist report RUNS_DIR [--out report.html|report.png]``: one page comparing the runs.

Thin layer: check the arguments, call :func:`tfdist.report.write_report`, print the path written.
Bad input is a usage error (exit 2) naming the argument and the fix, found before any event file
is read: a missing RUNS_DIR, one without runs or over a limit, an --out that cannot be written.
Runs read in part or not read (a damaged file, values no run logs) are one ``Warning:`` line each on
stderr, as is a figure that cannot be computed; when none could be read,
or the output cannot be written after all, the command exits 1.
"""
from __future__ import annotations

import os

import click

from tfdist.cli.strict import StrictCommand
from tfdist.errors import ArgumentValueError

_RUNS_FIX = "pass the --logdir your training wrote to (TensorBoardRun's logdir), e.g. runs"


def _out_error(exc: ArgumentValueError) -> str:
    return str(exc).replace("`out` ", "").replace("`out`", "--out")


def _check_out(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from tfdist.report import check_out

    if value is not None:
        try:
            check_out(value)
        except ArgumentValueError as exc:
            raise click.BadParameter(_out_error(exc), ctx=ctx, param=param) from None
    return value


def _check_runs_dir(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not os.path.isdir(value):
        what = "is not a folder" if os.path.exists(value) else "does not exist"
        raise click.BadParameter(f"{value!r} {what}; fix: {_RUNS_FIX}", ctx=ctx, param=param)
    return value


@click.command(cls=StrictCommand)
@click.argument("runs_dir", metavar="RUNS_DIR", callback=_check_runs_dir)
@click.option("--out", callback=_check_out, metavar="PATH.html|PATH.png",
              help="Where to write: .html (figures embedded, one file to share) or .png (one image). "
                   "Default: RUNS_DIR/report.html.")
@click.pass_context
def report(ctx: click.Context, runs_dir: str, out: str | None) -> None:
    """Draw the runs of RUNS_DIR side by side: loss and accuracy against wall-clock time, examples/s
    per run and per worker, scaling efficiency, time-to-target, predicted against measured examples/s
    (runs started from an advise plan), system metrics, and the HParams beside each run's results (last
    loss and accuracy, test figures, examples/s, time to target). A panel with nothing to draw is left
    out with a line saying what would fill it.

        tfdist report runs                      # writes runs/report.html
        tfdist report runs --out report.png

    Exit status: 0 written (runs not read are listed on stderr and the page), 1 no run could be read
    or the file could not be written, 2 bad usage (RUNS_DIR without runs or over a limit, bad --out).
    """
    from tfdist.report import NothingReadError, ReportError, check_out, write_report
    from tfdist.report.files import RunsDirError

    if out is None:
        out = os.path.join(runs_dir, "report.html")
        try:
            check_out(out)
        except ArgumentValueError as exc:
            raise click.BadParameter(f"the default {_out_error(exc)}", param_hint="'--out'") from None
    try:
        written = write_report(runs_dir, out, warn=lambda line: click.echo(f"Warning: {line}", err=True))
    except RunsDirError as exc:
        raise click.BadParameter(str(exc).replace("`runs_dir` ", ""), param_hint="'RUNS_DIR'") from None
    except NothingReadError as exc:
        for line in exc.lines:
            click.echo(line, err=True)
        click.echo(f"Error: {exc}", err=True)
        ctx.exit(1)
    except ReportError as exc:
        click.echo(f"Error: {exc}", err=True)
        ctx.exit(1)
    click.echo(written)
