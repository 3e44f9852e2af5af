"""Entry point of the ``tfdist`` console script.

Sub-commands live in their own modules and are imported lazily, so ``tfdist --help`` and
``tfdist tf-config`` start without importing TensorFlow. A command that does import it (``env``,
``export-check``) does so without TensorFlow's start-up lines unless the user set
``TF_CPP_MIN_LOG_LEVEL`` (:mod:`tfdist.tf_noise`); child processes get the user's environment unchanged.
"""
from __future__ import annotations

import importlib

import click

from tfdist.cli.strict import StrictGroup
from tfdist.tf_noise import quiet_tensorflow_import
from tfdist.version import __version__

# command name -> "module:attribute" of its click command
_COMMANDS = {
    "advise": "tfdist.cli.advise:advise",
    "env": "tfdist.cli.env:env",
    "export-check": "tfdist.cli.export_check:export_check",
    "tf-config": "tfdist.cli.tf_config:tf_config",
    "launch": "tfdist.cli.launch:launch",
    "report": "tfdist.cli.report:report",
}


class _LazyGroup(StrictGroup):
    """A click group that imports each sub-command only when it is used; single-valued options may be
    given once (:mod:`tfdist.cli.strict`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = _COMMANDS.get(name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return None
        return getattr(module, attribute)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="tfdist")
def cli() -> None:
    """tfdist: distributed training for Keras models (tf-keras and Keras 3) with Horovod or tf.distribute."""


def main() -> None:
    quiet_tensorflow_import()
    cli(prog_name="tfdist")
