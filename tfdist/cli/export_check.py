"""``tfdist export-check PATH``: show an export's signature and run one batch through it."""
from __future__ import annotations

import click

from tfdist.cli.strict import StrictCommand


@click.command("export-check", cls=StrictCommand)
@click.argument("path", type=click.Path(file_okay=False, dir_okay=True))
@click.option("--input", "input_file", type=click.Path(dir_okay=False),
              help="a .npy batch (one input) or .npz (arrays named after the inputs); default: zeros, "
                   "every unknown dimension 1")
def export_check(path: str, input_file: str | None) -> None:
    """Print the serving_default signature of the SavedModel at PATH (as `saved_model_cli show` does),
    run one batch through it and print the output shapes. Exit 1 on any failure (for deployment
    pipelines), 2 on a usage error. Every file is checked (kind, size, .npy header) before TensorFlow
    is imported."""
    from tfdist.export import check, files
    from tfdist.export.errors import ExportError

    if input_file is not None and not input_file.endswith((".npy", ".npz")):
        raise click.BadParameter(f"{input_file!r} is neither .npy nor .npz; fix: save the batch with "
                                 "numpy.save or numpy.savez", param_hint="'--input'")
    problem = None if input_file is None else files.regular_file_problem(input_file)
    if problem is not None:
        raise click.BadParameter(f"{input_file!r} {problem}; fix: pass a .npy or .npz file saved with numpy.save "
                                 "or numpy.savez (export-check reads regular files only)", param_hint="'--input'")
    try:
        if input_file is not None:
            files.check_batch(input_file)  # headers and sizes, nothing loaded
        signature = check.read_signature(path)  # checks the folder, then imports TensorFlow
        click.echo(check.signature_text(signature))
        outputs = check.run_batch(path, signature, check.batch_inputs(signature, input_file))
    except ExportError as exc:
        raise click.ClickException(str(exc)) from None
    for key, (shape, dtype) in outputs.items():
        click.echo(f"outputs['{key}']: shape {shape} dtype {dtype}")
