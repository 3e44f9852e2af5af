"""``tfdist tf-config``: generate TF_CONFIG for every task of a cluster, or validate one.

Thin layer: parse options, call :mod:`tfdist.cluster`, print. Bad input raises click.BadParameter
or click.UsageError (exit 2); ``validate`` exits 1 when the TF_CONFIG it reads is invalid.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Any, NoReturn

import click
from click.core import ParameterSource
from click.shell_completion import CompletionItem

from tfdist.cli.strict import StrictGroup
from tfdist.cli.types import BoundedInt, Parsed, TaskCount
from tfdist.cluster.build import EXPLICIT_OPTIONS, ClusterOptions, build_cluster, flag
from tfdist.cluster.errors import ClusterConfigError, ClusterOptionError, listing, shown
from tfdist.cluster.files import read_bounded
from tfdist.cluster.limits import MAX_INPUT_BYTES
from tfdist.cluster.k8s import (
    K8S_MODES,
    MAX_GPUS_PER_TASK,
    TaskResources,
    parse_cpu,
    parse_memory,
    render_k8s,
)
from tfdist.cluster.render import render_env, render_json, write_dir
from tfdist.cluster.sbatch import BatchJob, render_sbatch
from tfdist.cluster.slurm import slurm_cluster
from tfdist.cluster.source import check_source
from tfdist.cluster.spec import TASK_TYPES, Address, ClusterSpec
from tfdist.cluster.tf_config import (
    TF_CONFIG_ENV,
    all_tf_configs,
    parse_task,
    task_name,
    tf_config_for,
)
from tfdist.cluster.validate import validate_cluster, warnings_for

FORMATS = ("json", "env", "dir", "k8s", "slurm", "sbatch")
#: The options of --format k8s, by the field of the library's problems they answer for.
_K8S_FLAGS = {"image": "--k8s-image", "mode": "--k8s-mode", "name": "--k8s-name", "command": "--k8s-command",
              "runtime": "--k8s-runtime", "gpus": "--gpus-per-task", "cpu": "--cpu-per-task",
              "memory": "--memory-per-task"}
_K8S_OPTIONS = ("k8s_image", "k8s_mode", "k8s_name", "k8s_command", "k8s_runtime", "gpus_per_task",
                "cpu_per_task", "memory_per_task")
_SBATCH_OPTIONS = ("sbatch_command", "sbatch_nodes")
#: The options of --format sbatch, by the field of the library's problems they answer for.
_SBATCH_FLAGS = {"command": "--sbatch-command", "workers": "--workers", "ps": "--ps-count",
                 "chief": "--with-chief", "nodes": "--sbatch-nodes", "port": "--port"}


def _option_error(exc: ClusterOptionError) -> click.ClickException:
    """The library's error about the cluster options as click's: the blamed option's, else a usage error."""
    if exc.option is None:
        return click.UsageError(str(exc))
    return click.BadParameter(str(exc), param_hint=f"'{exc.option}'")


#: What a bare number given to a HOST:PORT option asks for, with the shorthand's option for it (``--ps`` is
#: a count in `launch` and `advise`, an address here; the names stay, so the error says which is which).
_COUNT_FIXES = {
    "--ps": "for {n} ps task(s) use --ps-count {n} with the shorthand --workers N --hosts h1,h2 (and "
            "--with-chief), or give each ps's address: --ps node1:2222",
    "--worker": "for {n} worker(s) use --workers {n} --hosts h1,h2, or give each worker's address: "
                "--worker node1:2222",
    "--chief": "for a chief use --with-chief with the shorthand --workers N --hosts h1,h2, or give its "
               "address: --chief node1:2222",
    "--evaluator": "for an evaluator use --with-evaluator with the shorthand --workers N --hosts h1,h2, or "
                   "give its address: --evaluator node1:2222",
}


class AddressType(click.ParamType):
    """A ``HOST:PORT`` option value, parsed into an :class:`Address`; a bare number (a count, as
    ``--ps 1`` is in `launch`) is refused with the count option that takes it."""

    name = "HOST:PORT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Address:
        if isinstance(value, Address):
            return value
        option = param.opts[0] if param else "address"
        number = value.strip() if isinstance(value, str) else ""
        if number.isascii() and number.isdigit() and option in _COUNT_FIXES:
            self.fail(f"{shown(value)} is a number, but {option} takes a task's address, HOST:PORT; fix: "
                      + _COUNT_FIXES[option].format(n=number if len(number) <= 6 else "N"), param, ctx)
        try:
            return Address.parse(value, field=option)
        except ClusterConfigError as exc:
            self.fail(exc.details, param, ctx)


def _complete_task(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Complete ``--task`` with the tasks of the cluster given so far, else with ``type:0``."""
    try:
        names = [task_name(t, i) for t, i in build_cluster(ClusterOptions.from_params(ctx.params)).tasks()]
    except (ClusterOptionError, ClusterConfigError, ValueError, OSError):  # fall back to the task types
        names = [f"{t}:0" for t in TASK_TYPES]
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def _given(ctx: click.Context, names: tuple[str, ...]) -> list[str]:
    """The options among `names` that the user set (not left at their default)."""
    return [n for n in names if ctx.get_parameter_source(n) not in (None, ParameterSource.DEFAULT)]



@click.group("tf-config", cls=StrictGroup, invoke_without_command=True)
@click.option("--chief", type=AddressType(),
              help="Address of the chief (coordinator of ParameterServerStrategy).")
@click.option("--worker", type=AddressType(), multiple=True,
              help="Address of a worker; repeat for each worker.")
@click.option("--ps", type=AddressType(), multiple=True,
              help="Address of a parameter server; repeat for each.")
@click.option("--evaluator", type=AddressType(),
              help="Address of the evaluator (never in the training cluster).")
@click.option("--file", "cluster_file", type=click.Path(exists=True, dir_okay=False),
              help="Cluster file, YAML or JSON: {chief: [...], worker: [...], ...} or a TF_CONFIG.")
@click.option("--workers", type=TaskCount(),
              help="Shorthand: number of workers, spread over --hosts.")
@click.option("--hosts", help="Shorthand: comma-separated hosts (SLURM hostlists like node[1-3] work).")
@click.option("--ps-count", type=TaskCount(), default=0, show_default=True,
              help="Shorthand and slurm: number of ps tasks.")
@click.option("--with-chief", is_flag=True, help="Shorthand and slurm: add a chief as the first task.")
@click.option("--with-evaluator", is_flag=True, help="Shorthand: add an evaluator as the last task.")
@click.option("--port", type=BoundedInt(1, 65535), default=2222, show_default=True,
              help="Shorthand and slurm: first port; the k-th task on a host gets PORT+k.")
@click.option("--task", metavar="TYPE:INDEX", shell_complete=_complete_task,
              help="Print only this task's TF_CONFIG, e.g. worker:1.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="json", show_default=True,
              help="json: one object per task; env: export lines; dir: one file per task in --out; "
                   "k8s: Kubernetes YAML; slurm: this SLURM task's TF_CONFIG from srun's variables; "
                   "sbatch: a SLURM batch script whose every task runs with its TF_CONFIG.")
@click.option("--out", type=click.Path(file_okay=False), help="Directory for --format dir.")
@click.option("--k8s-image", help="Container image for --format k8s.")
@click.option("--k8s-mode", type=click.Choice(K8S_MODES), default="tfjob", show_default=True,
              help="tfjob: a Kubeflow TFJob; plain: headless Services and Pods with TF_CONFIG; mpijob: an "
                   "mpi-operator MPIJob running Horovod; trainjob: a Kubeflow Trainer v2 TrainJob running "
                   "Horovod (mpijob and trainjob: workers only).")
@click.option("--k8s-name", default="tfdist", show_default=True,
              help="Name of the job / prefix of the Pods.")
@click.option("--k8s-command", help="Container command for --format k8s, e.g. 'python train.py' "
                                    "(mpijob and trainjob: what mpirun starts; required).")
@click.option("--k8s-runtime", metavar="NAME",
              help="--k8s-mode trainjob: the ClusterTrainingRuntime (with an MPI mlPolicy) it references.")
@click.option("--gpus-per-task", type=BoundedInt(0, MAX_GPUS_PER_TASK), metavar="N",
              help="--format k8s: nvidia.com/gpu limit of each chief/worker/evaluator container; under "
                   "mpijob/trainjob also the Horovod processes per worker.")
@click.option("--cpu-per-task", type=Parsed("CPU", lambda text: parse_cpu(text, field="")),
              help="--format k8s: CPU request of each task's container, e.g. 4 or 500m.")
@click.option("--memory-per-task", type=Parsed("SIZE", lambda text: parse_memory(text, field="")),
              help="--format k8s: memory request of each task's container, e.g. 16Gi.")
@click.option("--sbatch-command", metavar="COMMAND",
              help="--format sbatch: the command every task runs, e.g. 'python train.py' (required).")
@click.option("--sbatch-nodes", type=TaskCount(), metavar="N",
              help="--format sbatch: the nodes to ask for (default: one per task).")
@click.pass_context
def tf_config(ctx: click.Context, **options: Any) -> None:
    """Generate TF_CONFIG for every task of a cluster (the default), or `validate` one.

    \b
    tfdist tf-config --chief h1:2222 --worker h2:2222 --worker h3:2222 --ps h3:2223
    tfdist tf-config --workers 2 --ps-count 1 --with-chief --hosts h1,h2,h3 --format env
    tfdist tf-config --file cluster.yaml --task worker:1
    tfdist tf-config --format sbatch --workers 2 --ps-count 1 --with-chief --sbatch-command 'python train.py'
    tfdist tf-config validate            # checks $TF_CONFIG
    """
    if ctx.invoked_subcommand is not None:
        given = _given(ctx, tuple(options))
        if given:
            flags = ", ".join(flag(n) for n in given)
            raise click.UsageError(f"the generation options {flags} cannot be used "
                                   f"with 'tf-config {ctx.invoked_subcommand}'; fix: drop them")
        return
    _generate(ctx, options)


def _generate(ctx: click.Context, o: dict[str, Any]) -> None:
    fmt = o["fmt"]
    if o["out"] is not None and fmt != "dir":
        raise click.BadParameter(f"is only used with --format dir, not {fmt}; fix: add --format dir",
                                 param_hint="'--out'")
    k8s_given = _given(ctx, _K8S_OPTIONS)
    if k8s_given and fmt != "k8s":
        raise click.UsageError(f"{', '.join(flag(n) for n in k8s_given)} only apply to --format k8s; "
                               "fix: add --format k8s or drop them")
    sbatch_given = _given(ctx, _SBATCH_OPTIONS)
    if sbatch_given and fmt != "sbatch":
        verb = "applies" if len(sbatch_given) == 1 else "apply"
        raise click.UsageError(f"{', '.join(flag(n) for n in sbatch_given)} only {verb} to --format sbatch; "
                               "fix: add --format sbatch or drop them")
    if fmt == "slurm":
        return _generate_slurm(ctx, o)
    if fmt == "sbatch":
        return _generate_sbatch(ctx, o)
    try:
        spec = build_cluster(ClusterOptions.from_params(o, _given(ctx, tuple(o))))
    except ClusterOptionError as exc:
        raise _option_error(exc) from None
    problems = validate_cluster(spec)
    if problems:
        raise click.UsageError("the cluster is invalid:" + listing(problems))
    for warning in warnings_for(spec):
        click.echo(f"Warning: {warning}", err=True)
    if fmt == "k8s":
        if o["task"] is not None:
            raise click.UsageError("--task cannot be used with --format k8s, which describes the whole "
                                   "cluster; fix: drop --task")
        if not o["k8s_image"]:
            raise click.BadParameter("--format k8s needs a container image; "
                                     "fix: --k8s-image my-registry/train:1.0", param_hint="'--k8s-image'")
        click.echo(_render_k8s(spec, o), nl=False)
        return
    configs = _selected_configs(spec, o["task"])
    if fmt == "json":
        click.echo(render_json(configs, single=o["task"] is not None), nl=False)
    elif fmt == "env":
        click.echo(render_env(configs), nl=False)
    else:
        if o["out"] is None:
            raise click.BadParameter("--format dir needs a directory; fix: --out tf_configs/",
                                     param_hint="'--out'")
        try:
            paths = write_dir(configs, o["out"])
        except OSError as exc:  # bad input to --out (under a file, read-only, ...): a usage error, exit 2
            raise click.BadParameter(f"cannot write into {shown(o['out'])}: {exc.strerror or exc}; fix: "
                                     "give a directory you can write to", param_hint="'--out'") from None
        for path in paths:
            click.echo(str(path))


def _render_k8s(spec: ClusterSpec, o: dict[str, Any]) -> str:
    """The manifests of --format k8s; one problem becomes its option's error, several a list naming
    each option (exit 2 either way)."""
    command = _split_command(o["k8s_command"])
    try:
        resources = TaskResources(gpus=o["gpus_per_task"] or 0, cpu=o["cpu_per_task"],
                                  memory=o["memory_per_task"])
        return render_k8s(spec, o["k8s_image"], command, o["k8s_name"], o["k8s_mode"], resources=resources,
                          runtime=o["k8s_runtime"])
    except ClusterConfigError as exc:
        problems = exc.problems
    if problems[0].field == "tasks":  # --k8s-mode plain above MAX_EVERY_TASK
        raise click.UsageError(f"--k8s-mode plain: {problems[0].message}; fix: use --k8s-mode tfjob, "
                               "whose operator writes each task's TF_CONFIG")
    if len(problems) == 1:
        raise click.BadParameter(problems[0].detail, param_hint=f"'{_K8S_FLAGS[problems[0].field]}'")
    raise click.UsageError("the Kubernetes options are invalid:"
                           + listing(f"{_K8S_FLAGS[p.field]}: {p.detail}" for p in problems))


def _generate_slurm(ctx: click.Context, o: dict[str, Any]) -> None:
    other = _given(ctx, (*EXPLICIT_OPTIONS, "cluster_file", "workers", "hosts", "with_evaluator", "task"))
    if other:
        raise click.UsageError(f"{', '.join(flag(n) for n in other)} cannot be used with --format slurm, "
                               "which reads the cluster from SLURM's variables; fix: use only --ps-count, "
                               "--with-chief and --port")
    try:
        spec, (task_type, index) = slurm_cluster(os.environ, ps=o["ps_count"], port=o["port"],
                                                  chief=o["with_chief"])
    except ClusterConfigError as exc:
        raise click.UsageError("cannot build TF_CONFIG from SLURM's variables:" + listing(exc)) from None
    for warning in warnings_for(spec):
        click.echo(f"Warning: {warning}", err=True)
    click.echo(json.dumps(tf_config_for(spec, task_type, index), separators=(",", ":")))


def _generate_sbatch(ctx: click.Context, o: dict[str, Any]) -> None:
    """Print the batch script of --format sbatch; every problem names its option (exit 2)."""
    other = _given(ctx, (*EXPLICIT_OPTIONS, "cluster_file", "hosts", "with_evaluator", "task"))
    if other:
        raise click.UsageError(f"{', '.join(flag(n) for n in other)} cannot be used with --format sbatch, "
                               "whose nodes SLURM picks; fix: use only --workers, --ps-count, --with-chief, "
                               "--port, --sbatch-nodes and --sbatch-command")
    if o["workers"] is None:
        raise click.BadParameter("--format sbatch needs the number of workers; fix: --workers 2",
                                 param_hint="'--workers'")
    if not o["sbatch_command"]:
        raise click.BadParameter("--format sbatch needs the command every task runs; "
                                 "fix: --sbatch-command 'python train.py'", param_hint="'--sbatch-command'")
    command = tuple(_split_command(o["sbatch_command"], "--sbatch-command"))
    job = BatchJob(command=command, workers=o["workers"], ps=o["ps_count"], chief=o["with_chief"],
                   nodes=o["sbatch_nodes"], port=o["port"])
    try:
        click.echo(render_sbatch(job), nl=False)
    except ClusterConfigError as exc:
        problems = exc.problems
        if len(problems) == 1:
            raise click.BadParameter(problems[0].detail, param_hint=f"'{_SBATCH_FLAGS[problems[0].field]}'") \
                from None
        raise click.UsageError("the batch script's options are invalid:"
                               + listing(f"{_SBATCH_FLAGS[p.field]}: {p.detail}" for p in problems)) from None


def _selected_configs(spec: ClusterSpec, task: str | None) -> dict[str, dict[str, Any]]:
    if task is None:
        try:
            return all_tf_configs(spec)
        except ClusterConfigError as exc:
            raise click.UsageError(exc.details) from None
    try:
        task_type, index = parse_task(task, field="--task")
        return {task_name(task_type, index): tf_config_for(spec, task_type, index)}
    except ClusterConfigError as exc:
        raise click.BadParameter(exc.details, param_hint="'--task'") from None


def _split_command(command: str | None, option: str = "--k8s-command") -> list[str]:
    if not command:
        return []
    try:
        return shlex.split(command)
    except ValueError as exc:
        raise click.BadParameter(f"{command!r} cannot be split like a shell would: {exc}; "
                                 "fix: balance the quotes", param_hint=f"'{option}'") from None


@tf_config.command("validate")
@click.argument("source", required=False, type=click.Path(dir_okay=False, allow_dash=True))
def validate(source: str | None) -> None:
    """Check a TF_CONFIG ($TF_CONFIG by default, or FILE, or - for stdin); print every problem.

    Exit status: 0 valid, 1 invalid (also: over 1 MiB, not UTF-8, too deep, YAML aliases), 2 bad
    usage (unset TF_CONFIG, missing file). A FILE may also be a cluster file ({chief: [...],
    worker: [...]}, YAML or JSON); $TF_CONFIG and stdin are always read as a TF_CONFIG.
    """
    if source is None:
        raw: str | bytes | None = os.environ.get(TF_CONFIG_ENV)
        if raw is None:
            raise click.UsageError(f"{TF_CONFIG_ENV} is not set; fix: export {TF_CONFIG_ENV}='{{...}}', "
                                   "or pass a FILE, or - to read stdin")
        where = f"${TF_CONFIG_ENV}"
    elif source == "-":
        raw, where = _read_stdin(), "stdin"
    else:
        try:
            raw = read_bounded(source)
        except ClusterConfigError as exc:
            raise click.BadParameter(exc.details, param_hint="'SOURCE'") from None
        where = source
    check = check_source(raw, where, from_file=source not in (None, "-"))
    if not check.valid:
        _report_invalid(where, [str(p) for p in check.problems])
    click.echo(check.verdict)
    for warning in check.warnings():
        click.echo(f"Warning: {warning}", err=True)


def _read_stdin() -> bytes | str:
    """At most MAX_INPUT_BYTES + 1 of stdin, as bytes when it has them (decoding reports bad UTF-8)."""
    stream = getattr(sys.stdin, "buffer", None)
    return stream.read(MAX_INPUT_BYTES + 1) if stream is not None else sys.stdin.read(MAX_INPUT_BYTES + 1)


def _report_invalid(where: str, lines: list[str]) -> NoReturn:
    """Print the problem on one line, or several as a list (at most MAX_LISTED), and exit 1."""
    if len(lines) == 1:
        click.echo(f"{where} is invalid: {lines[0]}")
    else:
        click.echo(f"{where} is invalid ({len(lines)} problems):" + listing(lines))
    click.get_current_context().exit(1)
