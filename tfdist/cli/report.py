"""``tfdist report RUNS_DIR [--out report.html|report.png]``: one page comparing the runs.

Thin layer: check the arguments, call :func:`tfdist.report.write_report`, print the path written.
Bad input is a usage error (exit 2) naming the argument and the fix, found before any event file
is read.
"""
from __future__ import annotations

import os

import click

from tfdist.cli.strict import StrictCommand
from tfdist.errors import ArgumentValueError

_RUNS_FIX = "pass the --logdir your training wrote to (TensorBoardRun's logdir), e.g. runs"


def _check_out(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from tfdist.report import check_out

    if value is not None:
        try:
            check_out(value)
        except ArgumentValueError as exc:
            raise click.BadParameter(str(exc).replace("`out`", "--out"), ctx=ctx, param=param) from None
    return value


def _check_runs_dir(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from tfdist.report.events import run_folders

    if not os.path.isdir(value):
        what = "is not a folder" if os.path.exists(value) else "does not exist"
        raise click.BadParameter(f"{value!r} {what}; fix: {_RUNS_FIX}", ctx=ctx, param=param)
    if not run_folders(value):
        raise click.BadParameter(
            f"{value!r} holds no TensorBoard runs (no '*tfevents*' file in it or its sub-folders); "
            f"fix: {_RUNS_FIX}", ctx=ctx, param=param)
    return value


@click.command(cls=StrictCommand)
@click.argument("runs_dir", metavar="RUNS_DIR", callback=_check_runs_dir)
@click.option("--out", callback=_check_out, metavar="PATH.html|PATH.png",
              help="Where to write: .html (figures embedded, one file to share) or .png (one image). "
                   "Default: RUNS_DIR/report.html.")
def report(runs_dir: str, out: str | None) -> None:
    """Draw the runs of RUNS_DIR side by side: loss and accuracy against wall-clock time, examples/s
    per run and per worker, scaling efficiency, time-to-target, system metrics and the HParams.

        tfdist report runs                      # writes runs/report.html
        tfdist report runs --out report.png
    """
    from tfdist.report import write_report

    click.echo(write_report(runs_dir, out or os.path.join(runs_dir, "report.html")))
