"""``tfdist env``: versions, builds and the detected cluster, for bug reports."""
from __future__ import annotations

import json

import click

from tfdist.cli.strict import StrictCommand


@click.command(cls=StrictCommand)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--no-tensorflow", is_flag=True,
              help="Skip the checks that import TensorFlow and Horovod (faster).")
def env(as_json: bool, no_tensorflow: bool) -> None:
    """Print Python, TensorFlow, tf-keras, Keras, Horovod and TensorBoard versions, Horovod's
    build, where tf.keras points and who set TF_USE_LEGACY_KERAS (your environment, or import
    tfdist when it was unset), visible GPUs and the cluster environment detected."""
    from tfdist.env_report import collect_report, format_report

    report = collect_report(with_tensorflow=not no_tensorflow)
    click.echo(json.dumps(report, indent=2, sort_keys=False) if as_json else format_report(report))
