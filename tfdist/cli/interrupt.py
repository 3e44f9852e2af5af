"""Ctrl-C in a command exits 130 (128 + SIGINT), as a shell reports it and as ``tfdist launch``'s
runners do, with one line on stderr; click's own handling would print ``Aborted!`` and exit 1.

    with exit_on_interrupt("advise"):
        found = probe_hosts(...)     # the probe's agents are stopped by its own ``finally``
"""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator

import click

INTERRUPTED = 128 + signal.SIGINT  # 130


@contextlib.contextmanager
def exit_on_interrupt(command: str, what: str = "interrupted") -> Iterator[None]:
    """Turn a ``KeyboardInterrupt`` inside the block into ``tfdist COMMAND: WHAT`` on stderr and exit
    code 130."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo(f"tfdist {command}: {what}", err=True)
        raise SystemExit(INTERRUPTED) from None
