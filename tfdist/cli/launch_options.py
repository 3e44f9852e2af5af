"""``tfdist launch``'s option rules: which backend reads which option (the backend table's,
:mod:`tfdist.launch.backends`, plus ``--backend auto``'s), which option needs another, and the usage
error naming the flags and the fix when a command line breaks one. Parsing only: nothing is started.

    reject_foreign_options(ctx, "horovod")   # --workers 3: "... fix: use -np 3 in place of --workers 3"
"""
from __future__ import annotations

import click
from click.core import ParameterSource

from tfdist.launch.backends import SSH_OPTIONS, TABLE

AUTO = "auto"  # probe --hosts, ask `tfdist advise`, launch the recommended backend
# which options each backend reads (the backend table's); giving another backend's option is an error
BACKEND_OPTIONS = {**{backend.name: backend.options for backend in TABLE},
                    AUTO: {"workers", "ps", "model", "batch_size", "probe_seconds", "save_plan", "task_timeout",
                           "optimizer", "embeddings", "no_adapt", "adapt_margin", *SSH_OPTIONS}}
FLAGS = {"workers": "--workers", "ps": "--ps", "evaluator": "--evaluator", "num_proc": "-np",
          "hosts": "--hosts", "bind_all": "--bind-all", "task_timeout": "--task-timeout",
          "chief_host": "--chief-host",
          "ps_hosts": "--ps-hosts", "ssh_port": "--ssh-port", "ssh_identity_file": "--ssh-identity-file",
          "elastic": "--elastic", "min_np": "--min-np", "max_np": "--max-np",
          "network_interface": "--network-interface", "model": "--model", "batch_size": "--batch-size",
          "probe_seconds": "--probe-seconds", "save_plan": "--save-plan", "optimizer": "--optimizer",
          "embeddings": "--embedding", "no_adapt": "--no-adapt", "adapt_margin": "--adapt-margin"}
# options that need another one: (option, needs, fix)
_NEEDS = (("chief_host", "hosts", "add --hosts"), ("ps_hosts", "hosts", "add --hosts"),
          ("ssh_port", "hosts", "add --hosts (ssh is used only to reach its hosts)"),
          ("ssh_identity_file", "hosts", "add --hosts (ssh is used only to reach its hosts)"),
          ("elastic", "hosts", "add --hosts h1:1,h2:1 (the hosts that may come and go)"),
          ("min_np", "elastic", "add --elastic"), ("max_np", "elastic", "add --elastic"))
# options that contradict each other: (option, other, fix)
_EXCLUSIVE = (("adapt_margin", "no_adapt", "--adapt-margin sets when an adaptive run switches; drop one"),)


def given(ctx: click.Context, name: str) -> bool:
    """Whether ``name`` was given on the command line (or the environment), not left at its default."""
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


# an option of another backend that says the same as one of this backend: (given, backend) -> its name here
_SAME_AS = {("workers", "horovod"): "num_proc", ("num_proc", "parameter_server"): "workers",
            ("num_proc", "multi_worker_mirrored"): "workers", ("num_proc", AUTO): "workers"}


def reject_foreign_options(ctx: click.Context, backend: str) -> None:
    """A usage error when an option of another backend is given, or one without the option it needs."""
    foreign = [name for name in FLAGS if given(ctx, name) and name not in BACKEND_OPTIONS[backend]]
    if foreign:
        flags = ", ".join(FLAGS[name] for name in foreign)
        fixes = [f"use {FLAGS[_SAME_AS[name, backend]]} {ctx.params[name]} in place of {FLAGS[name]} "
                 f"{ctx.params[name]}" for name in foreign if (name, backend) in _SAME_AS]
        others = ", ".join(FLAGS[name] for name in foreign if (name, backend) not in _SAME_AS)
        if others:
            fixes.append(f"drop {others}, or pick the backend they belong to")
        raise click.UsageError(f"{flags} do(es) not apply to --backend {backend}; fix: {'; '.join(fixes)}")
    for name, needs, fix in _NEEDS:
        if given(ctx, name) and not given(ctx, needs):
            raise click.UsageError(f"{FLAGS[name]} needs {FLAGS[needs]}; fix: {fix}, or drop "
                                   f"{FLAGS[name]}")
    for name, other, fix in _EXCLUSIVE:
        if given(ctx, name) and given(ctx, other):
            raise click.UsageError(f"{FLAGS[name]} and {FLAGS[other]} contradict each other; fix: {fix}")
    if given(ctx, "elastic") and not given(ctx, "min_np"):
        raise click.UsageError("--elastic needs --min-np, the fewest ranks training may go on with; fix: add "
                               "e.g. --min-np 1")
