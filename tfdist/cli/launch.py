"""``tfdist launch``: start a tf.distribute cluster (on this machine, or on ``--hosts`` over ssh), or a
Horovod job via horovodrun.

Thin: click's options, their checks (which backend reads which option: :mod:`tfdist.launch.backends`),
then the library: :mod:`tfdist.auto` decides ``--backend auto``, :mod:`tfdist.launch.runners` starts the
backend; their errors become usage errors (exit 2) or failures (exit 1) with the same messages.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import click

from tfdist.advise.errors import AdviseError
from tfdist.advise.model_inputs import MAX_BATCH_SIZE
from tfdist.advise.user_inputs import parse_model_ref
from tfdist.adapt import DEFAULT_MARGIN
from tfdist.auto import AutoRequest, Decision, MeasureError, decide
from tfdist.auto.adaptive import AdaptiveLaunch, RunFolderError, check_run_folder
from tfdist.cli.brief_help import BriefOption
from tfdist.cli.interrupt import exit_on_interrupt
from tfdist.cli.launch_options import AUTO, FLAGS, given, reject_foreign_options
from tfdist.cli.strict import StrictCommand
from tfdist.cli.types import (EMBEDDING, OPTIMIZER, BoundedInt, FiniteFloat, Parsed, hosts_or_allocation,
                              writable_launch_plan_path)
from tfdist.cluster.limits import MAX_TASKS, limit_text
from tfdist.keras_compat import user_environment
from tfdist.launch.backends import HOROVODRUN, LAUNCHABLE, backend_named
from tfdist.launch.checks import (check_cluster_size, check_host_options, check_local_command,
                                  check_network_interface, check_placement, horovod_ranks)
from tfdist.launch.errors import LaunchError
from tfdist.launch.hosts import HostList
from tfdist.launch.policy import DEFAULT_TASK_TIMEOUT
from tfdist.launch.remote import SshOptions
from tfdist.launch.runners import StartError, run_horovodrun, run_tf_cluster
from tfdist.run_channel import ADAPT_ENV
from tfdist.plan import (PLANS_FOLDER, PlanError, default_plan_path, measured_path, plan_environment,
                         plans_folder_problem, result_summary, run_folder_path, save_plan)

AUTO_PROBE_SECONDS = 1.0  # s of transfer per link: the short probe of --backend auto
MAX_GRACE = 3600.0  # s between the stop signal and SIGKILL: an hour
MAX_TASK_TIMEOUT = 86_400.0  # s: a day
_TASKS = BoundedInt(1, MAX_TASKS, limit=f"tfdist's limit is {limit_text(MAX_TASKS)} tasks per cluster")
_MODEL = Parsed("MODULE:FUNCTION", lambda text: parse_model_ref(text, field=""))  # click names the option


@click.command(cls=StrictCommand, context_settings={"allow_interspersed_args": False},
               epilog="Placement, teardown, environment and every option: docs/cli.md.")
@click.option("--backend", type=click.Choice((*LAUNCHABLE, AUTO)), default="parameter_server",
              show_default=True,
              help="auto: probe --hosts, launch the advised backend.")
@click.option("--workers", cls=BriefOption, type=_TASKS, default=2, show_default=True, metavar="N",
              help="Workers (not horovod: -np).")
@click.option("--ps", cls=BriefOption, type=_TASKS, default=1, show_default=True, metavar="N",
              help="Parameter servers.")
@click.option("--evaluator", is_flag=True, help="Add a sidecar evaluator task.")
@click.option("-np", "--num-proc", "num_proc", cls=BriefOption, type=_TASKS, default=2, show_default=True,
              metavar="N", help="horovod: ranks.")
@click.option("-H", "--hosts", metavar="HOST:SLOTS,...", help="Run over ssh on these hosts, e.g. h1:2,h2:1.")
@click.option("--chief-host", metavar="HOST", help="The chief's host (default: the first).")
@click.option("--ps-hosts", metavar="HOST,...", help="The ps tasks' hosts (default: the last).")
@click.option("--ssh-port", cls=BriefOption, type=BoundedInt(1, 65535), metavar="PORT",
              help="Every host's sshd port.")
@click.option("--ssh-identity-file", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="The private key ssh uses.")
@click.option("--elastic", is_flag=True, help="horovod: hosts may leave and join.")
@click.option("--min-np", cls=BriefOption, type=_TASKS, metavar="N", help="--elastic: fewest ranks.")
@click.option("--max-np", cls=BriefOption, type=_TASKS, metavar="N", help="--elastic: most ranks.")
@click.option("--network-interface", metavar="IFACE", help="horovod: the ranks' interface, e.g. eth0.")
@click.option("--bind-all", is_flag=True,
              help="Listen on every interface (no auth).")
@click.option("--model", metavar="MODULE:FUNCTION", type=_MODEL,
              help="auto: builds the model to time (else a guess).")
@click.option("--batch-size", cls=BriefOption, type=BoundedInt(1, MAX_BATCH_SIZE), metavar="N",
              help="auto: examples per step per worker.")
@click.option("--optimizer", type=OPTIMIZER, help="auto: fit its slots in memory, e.g. adam.")
@click.option("--embedding", "embeddings", type=EMBEDDING, multiple=True, metavar="ROWSxDIM[:N]",
              help="auto: an embedding table; repeatable.")
@click.option("--probe-seconds", cls=BriefOption, type=FiniteFloat(0.5, 60), default=AUTO_PROBE_SECONDS,
              show_default=True, metavar="S", help="auto: most seconds per link (a steady rate ends sooner).")
@click.option("--save-plan", metavar="PLAN.json", callback=writable_launch_plan_path,
              help="auto: where to save the plan.")
@click.option("--no-adapt", is_flag=True, help="auto: keep the first plan to the end.")
@click.option("--adapt-margin", cls=BriefOption, type=FiniteFloat(0, 0.9), default=DEFAULT_MARGIN,
              show_default=True, metavar="SHARE", help="auto: switch when that much sooner.")
@click.option("--grace", cls=BriefOption, type=FiniteFloat(0, MAX_GRACE), default=5.0, show_default=True,
              metavar="S", help="TERM-to-KILL seconds.")
@click.option("--task-timeout", cls=BriefOption, type=FiniteFloat(0, MAX_TASK_TIMEOUT),
              default=DEFAULT_TASK_TIMEOUT, show_default=True, metavar="S",
              help="Deadline after a lost task.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def launch(ctx: click.Context, **options: Any) -> None:
    """Run COMMAND as every task of a cluster; exit with the chief's exit code.

    \b
    tfdist launch --workers 2 --ps 1 -- python train.py
    tfdist launch --backend horovod -np 2 -- python train.py
    tfdist launch --hosts h1:1,h2:1,h3:1 --workers 2 --ps 1 -- python train.py
    tfdist launch --backend auto --hosts h1:1,h2:1,h3:1 -- python train.py

    Every task gets your environment as given, TF_USE_LEGACY_KERAS included.
    """
    with exit_on_interrupt("launch"):
        _launch(ctx, **options)


def _launch(ctx: click.Context, backend: str, workers: int, ps: int, evaluator: bool, num_proc: int,
            hosts: str | None, chief_host: str | None, ps_hosts: str | None, ssh_port: int | None,
            ssh_identity_file: str | None, elastic: bool, min_np: int | None, max_np: int | None,
            network_interface: str | None, model: str | None, batch_size: int | None, probe_seconds: float,
            save_plan: str | None, bind_all: bool, grace: float, task_timeout: float,
            command: tuple[str, ...], optimizer: tuple[str, int] | None = None, embeddings: tuple = (),
            no_adapt: bool = False, adapt_margin: float = DEFAULT_MARGIN) -> None:
    """The command's body, with click's options; a Ctrl-C before the runners take over (during
    ``--backend auto``'s probe, say) exits 130 (``exit_on_interrupt``)."""
    reject_foreign_options(ctx, backend)
    hosts = _check(check_host_options, hosts, chief_host, ps_hosts)  # --hosts parsed once, passed along
    if network_interface is not None and not network_interface.strip():
        raise click.UsageError("--network-interface is empty; fix: name the interface the ranks talk over, "
                               "e.g. --network-interface eth0, or drop --network-interface")
    if network_interface is not None:
        try:
            check_network_interface(network_interface, field="")
        except LaunchError as exc:
            raise click.BadParameter(str(exc), param_hint="'--network-interface'") from None
    if backend == AUTO:
        allocation = hosts_or_allocation(hosts)
        hosts = None if allocation is None else _check(HostList.parse, allocation)
        _check_auto(ctx, hosts)
    if hosts is None:  # tasks on --hosts are checked on their hosts (the preflight)
        try:
            check_local_command(command, os.getcwd())
        except LaunchError as exc:
            raise click.BadParameter(str(exc), param_hint="COMMAND") from None
    elif shutil.which(command[0]) is None:
        raise click.BadParameter(f"{_shown(command[0])} is not an executable on PATH; fix: give the full "
                                 "path, e.g. `-- /usr/bin/python3 train.py`", param_hint="COMMAND")
    ssh = SshOptions(ssh_port, ssh_identity_file)
    environ, plan, result_path = user_environment(), None, None
    if backend == AUTO:
        if given(ctx, "workers"):
            _check(check_cluster_size, workers, ps)
        if save_plan is None and (problem := plans_folder_problem()) is not None:
            raise click.UsageError(f"--backend auto saves its plan in ./{PLANS_FOLDER}/ unless --save-plan says "
                                   f"where, and {problem}; fix: pass --save-plan PATH in a writable folder, or "
                                   "launch from one")
        if save_plan is not None and not no_adapt:  # a folder the run would empty: refused before the probe
            try:
                check_run_folder(run_folder_path(save_plan))
            except RunFolderError as exc:
                raise click.UsageError(str(exc)) from None
        decision = _choose_backend(ctx, hosts, workers, ps, model, batch_size, ssh, probe_seconds, optimizer,
                                   embeddings)
        backend, hosts, workers, plan = decision.backend.name, decision.hosts, decision.workers, decision.plan()
        if plan is not None:
            environ, plan_path = _apply_plan(plan, save_plan, environ)
            result_path = measured_path(plan_path)

    def run(backend: str, hosts: HostList | None, workers: int, environ: dict[str, str],
            finished: Callable[[], bool] | None = None) -> int:
        chosen = _check(backend_named, backend)
        if chosen.launcher == HOROVODRUN:
            given_np = num_proc if given(ctx, "num_proc") else None
            ranks = _check(horovod_ranks, hosts, given_np, elastic, min_np, max_np, default=num_proc)
            return _launch_horovod(ctx, command, ranks, hosts, ssh, elastic, min_np, max_np, grace,
                                   network_interface, environ, finished=finished)
        tasks_ps = ps if chosen.ps else 0
        _check(check_cluster_size, workers, tasks_ps, evaluator, chief=chosen.chief)
        if hosts is not None:
            _check(check_placement, hosts, workers, tasks_ps, evaluator, chief=chosen.chief,
                   chief_host=chief_host, ps_hosts=ps_hosts)
        return _launch_tf_cluster(backend, command, workers, ps, evaluator, hosts, chief_host, ps_hosts,
                                  ssh, bind_all, grace, task_timeout, environ, finished=finished)

    if plan is not None:  # the run folder under auto is this launcher's own, or none
        environ = {name: value for name, value in environ.items() if name != ADAPT_ENV}
    if plan is not None and not no_adapt:  # every backend auto plans is one a run switches between
        adaptive = AdaptiveLaunch(decision, run_folder_path(plan_path), lambda chosen, env, finished: run(
            chosen.backend.name, chosen.hosts, chosen.workers, env, finished), environ, result_path, _report,
                                  adapt_margin)
        try:
            code = adaptive.run()
        except RunFolderError as exc:
            raise click.UsageError(str(exc)) from None
        decision, plan = adaptive.final, adaptive.final.plan()
    else:
        code = run(backend, hosts, workers, environ)
    if plan is not None:
        _report(result_summary(plan, result_path))
        if (looking_back := decision.hindsight(result_path)) is not None:
            _report(looking_back)
    raise SystemExit(code)


def _apply_plan(plan, save_path: str | None, environ: dict[str, str]) -> tuple[dict[str, str], str]:
    """Print and save ``plan``; the tasks' environment with it inline (and where the chief writes its
    measured figures, beside the saved plan), and where it was saved."""
    path = save_path or os.path.join(PLANS_FOLDER, "plan.json")  # named in the error if the folder fails
    try:
        path = save_path or default_plan_path()
        save_plan(plan, path)
    except (OSError, PlanError) as exc:
        raise click.ClickException(f"cannot save the plan to {path!r} ({exc}); fix: pass --save-plan with a "
                                   "writable path") from None
    result_path = measured_path(path)
    _report(f"{plan.describe()}\ntfdist launch --backend auto: the plan is saved to {path}; every task gets it "
            "in TFDIST_PLAN")
    return {**environ, **plan_environment(plan, result_path)}, path


def _shown(text: str, limit: int = 80) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _check(check, *args, **kwargs):
    """Call a check of the library; its LaunchError is a usage error (exit 2)."""
    try:
        return check(*args, **kwargs)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None


def _check_auto(ctx: click.Context, hosts: str | None) -> None:
    """--backend auto needs --hosts (it compares links between hosts); --optimizer and --embedding need
    --model (the memory check counts the model's own variables)."""
    if hosts is None:
        raise click.UsageError("--backend auto needs --hosts: it compares the link rates between hosts; fix: "
                               "add --hosts h1:1,h2:1,... (inside a SLURM allocation its nodes stand in), "
                               "or on one machine pick --backend "
                               "parameter_server, multi_worker_mirrored or horovod")
    for name in ("optimizer", "embeddings"):
        if given(ctx, name) and not given(ctx, "model"):
            raise click.UsageError(f"{FLAGS[name]} needs --model: the memory check counts the model's own "
                                   f"variables; fix: add e.g. --model models:build_model --batch-size 64, or "
                                   f"drop {FLAGS[name]}")


def _choose_backend(ctx: click.Context, hosts: HostList, workers: int, ps: int, model: str | None,
                    batch_size: int | None,
                    ssh: SshOptions, probe_seconds: float, optimizer: tuple[str, int] | None = None,
                    embeddings: tuple = ()) -> Decision:
    """--backend auto (:func:`tfdist.auto.decide`), the advice printed to stderr: the decision to launch
    (its backend, hosts, workers and plan). horovod and multi_worker_mirrored get only the hosts that the
    placement gives workers. With ``optimizer`` the probed memory is checked: a backend that would not fit is not
    chosen, and when none fits nothing is launched (a usage error with the numbers)."""
    request = AutoRequest(hosts, ps, batch_size, model, workers if given(ctx, "workers") else None, ssh,
                          probe_seconds, embeddings=tuple(embeddings), optimizer=optimizer, first_guess=True)
    try:
        decision = decide(request, log=_report)
    except (MeasureError, LaunchError) as exc:
        raise click.UsageError(str(exc)) from None
    except AdviseError as exc:  # the tables are the one value of the advice that launch's user gave
        raise click.UsageError(f"--embedding: {exc}" if exc.field == "embeddings" else str(exc)) from None
    _report(decision.describe())
    _report(f"tfdist launch --backend auto: launching {decision.backend.name} ({decision.advice.variant}) on "
            f"{decision.hosts}")
    return decision


def _report(message: str) -> None:
    click.echo(message, err=True)


def _launch_horovod(ctx: click.Context, command: tuple[str, ...], num_proc: int, hosts: str | None,
                    ssh: SshOptions, elastic: bool, min_np: int | None, max_np: int | None, grace: float,
                    network_interface: str | None, environ: dict[str, str] | None = None,
                    finished: Callable[[], bool] | None = None) -> int:
    """horovodrun with ``num_proc`` ranks (:func:`tfdist.launch.runners.run_horovodrun`), in ``environ``
    (default this process's); its exit code (0 once ``finished()`` says the work is done)."""
    given_np = num_proc if given(ctx, "num_proc") else None
    try:
        return run_horovodrun(command, num_proc, hosts, ssh, elastic, min_np, max_np, given_np, grace,
                              network_interface, environ, finished=finished)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None


def _launch_tf_cluster(backend: str, command: tuple[str, ...], workers: int, ps: int, evaluator: bool,
                       hosts: str | None, chief_host: str | None, ps_hosts: str | None, ssh: SshOptions,
                       bind_all: bool, grace: float, task_timeout: float,
                       environ: dict[str, str] | None = None, finished: Callable[[], bool] | None = None) -> int:
    """A parameter_server or multi_worker_mirrored cluster (:func:`tfdist.launch.runners.run_tf_cluster`),
    here or on ``hosts``, its tasks started in ``environ`` (default: the user's); the chief's exit code
    (0 once ``finished()`` says the work is done)."""
    environ = user_environment() if environ is None else environ
    try:
        return run_tf_cluster(backend_named(backend), command, workers, ps, evaluator, hosts, chief_host,
                              ps_hosts, ssh, bind_all, grace, task_timeout, environ, finished)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    except StartError as exc:
        raise click.ClickException(str(exc)) from None
