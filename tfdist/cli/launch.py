"""``tfdist launch``: start a tf.distribute cluster (on this machine, or on ``--hosts`` over ssh), or a
Horovod job via horovodrun."""
from __future__ import annotations

import os
import sys
from typing import Any

import click
from click.core import ParameterSource

from tfdist.advise.cluster import MAX_BATCH_SIZE
from tfdist.advise.inputs import parse_model_ref
from tfdist.cli.brief_help import BriefOption
from tfdist.cli.interrupt import exit_on_interrupt
from tfdist.cli.strict import StrictCommand
from tfdist.cli.types import EMBEDDING, OPTIMIZER, BoundedInt, FiniteFloat, Parsed, hosts_or_allocation, writable_plan_path
from tfdist.cluster.limits import MAX_TASKS, limit_text
from tfdist.launch.backends import LAUNCHABLE
from tfdist.keras_compat import user_environment
from tfdist.launch.checks import (check_cluster_size, check_host_options, check_local_command,
                                  check_network_interface, check_placement, horovod_ranks)
from tfdist.launch.plan import LaunchError, horovodrun_command, plan_local_cluster, plan_worker_cluster
from tfdist.launch.policy import DEFAULT_TASK_TIMEOUT

AUTO = "auto"  # probe --hosts, ask `tfdist advise`, launch the recommended backend
AUTO_PROBE_SECONDS = 1.0  # s of transfer per link: the short probe of --backend auto
MAX_GRACE = 3600.0  # s between the stop signal and SIGKILL: an hour
MAX_TASK_TIMEOUT = 86_400.0  # s: a day
_TASKS = BoundedInt(1, MAX_TASKS, limit=f"tfdist's limit is {limit_text(MAX_TASKS)} tasks per cluster")
_MODEL = Parsed("MODULE:FUNCTION", lambda text: parse_model_ref(text, field=""))  # click names the option
_SSH = {"hosts", "ssh_port", "ssh_identity_file"}
# which options each backend reads; giving another backend's option is an error, not ignored
_BACKEND_OPTIONS = {
    "parameter_server": {"workers", "ps", "evaluator", "bind_all", "task_timeout", "chief_host", "ps_hosts",
                         *_SSH},
    "multi_worker_mirrored": {"workers", "bind_all", *_SSH},
    "horovod": {"num_proc", "elastic", "min_np", "max_np", "network_interface", *_SSH},
    AUTO: {"workers", "ps", "model", "batch_size", "probe_seconds", "save_plan", "task_timeout", "optimizer", "embeddings",
           *_SSH},
}
_FLAGS = {"workers": "--workers", "ps": "--ps", "evaluator": "--evaluator", "num_proc": "-np",
          "hosts": "--hosts", "bind_all": "--bind-all", "task_timeout": "--task-timeout",
          "chief_host": "--chief-host",
          "ps_hosts": "--ps-hosts", "ssh_port": "--ssh-port", "ssh_identity_file": "--ssh-identity-file",
          "elastic": "--elastic", "min_np": "--min-np", "max_np": "--max-np",
          "network_interface": "--network-interface", "model": "--model", "batch_size": "--batch-size",
          "probe_seconds": "--probe-seconds", "save_plan": "--save-plan", "optimizer": "--optimizer",
          "embeddings": "--embedding"}
# options that need another one: (option, needs, fix)
_NEEDS = (("chief_host", "hosts", "add --hosts"), ("ps_hosts", "hosts", "add --hosts"),
          ("ssh_port", "hosts", "add --hosts (ssh is used only to reach its hosts)"),
          ("ssh_identity_file", "hosts", "add --hosts (ssh is used only to reach its hosts)"),
          ("elastic", "hosts", "add --hosts h1:1,h2:1 (the hosts that may come and go)"),
          ("min_np", "elastic", "add --elastic"), ("max_np", "elastic", "add --elastic"))


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


# an option of another backend that says the same as one of this backend: (given, backend) -> its name here
_SAME_AS = {("workers", "horovod"): "num_proc", ("num_proc", "parameter_server"): "workers",
            ("num_proc", "multi_worker_mirrored"): "workers", ("num_proc", AUTO): "workers"}


def _reject_foreign_options(ctx: click.Context, backend: str) -> None:
    given = [name for name in _FLAGS if _given(ctx, name) and name not in _BACKEND_OPTIONS[backend]]
    if given:
        flags = ", ".join(_FLAGS[name] for name in given)
        fixes = [f"use {_FLAGS[_SAME_AS[name, backend]]} {ctx.params[name]} in place of {_FLAGS[name]} "
                 f"{ctx.params[name]}" for name in given if (name, backend) in _SAME_AS]
        others = ", ".join(_FLAGS[name] for name in given if (name, backend) not in _SAME_AS)
        if others:
            fixes.append(f"drop {others}, or pick the backend they belong to")
        raise click.UsageError(f"{flags} do(es) not apply to --backend {backend}; fix: {'; '.join(fixes)}")
    for name, needs, fix in _NEEDS:
        if _given(ctx, name) and not _given(ctx, needs):
            raise click.UsageError(f"{_FLAGS[name]} needs {_FLAGS[needs]}; fix: {fix}, or drop "
                                   f"{_FLAGS[name]}")
    if _given(ctx, "elastic") and not _given(ctx, "min_np"):
        raise click.UsageError("--elastic needs --min-np, the fewest ranks training may go on with; fix: add "
                               "e.g. --min-np 1")


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
@click.option("--model", metavar="MODULE:FUNCTION", type=_MODEL, help="auto: builds the model to time.")
@click.option("--batch-size", cls=BriefOption, type=BoundedInt(1, MAX_BATCH_SIZE), metavar="N",
              help="auto: examples per step per worker.")
@click.option("--optimizer", type=OPTIMIZER, help="auto: fit its slots in memory, e.g. adam.")
@click.option("--embedding", "embeddings", type=EMBEDDING, multiple=True, metavar="ROWSxDIM[:N]",
              help="auto: an embedding table; repeatable.")
@click.option("--probe-seconds", cls=BriefOption, type=FiniteFloat(0.5, 60), default=AUTO_PROBE_SECONDS,
              show_default=True, metavar="S", help="auto: seconds per link.")
@click.option("--save-plan", metavar="PLAN.json", callback=writable_plan_path,
              help="auto: where to save the plan.")
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
    tfdist launch --backend auto --hosts h1:1,h2:1,h3:1 --model models:build_model \\
        --batch-size 64 -- python train.py

    Every task gets your environment as given, TF_USE_LEGACY_KERAS included.
    """
    with exit_on_interrupt("launch"):
        _launch(ctx, **options)


def _launch(ctx: click.Context, backend: str, workers: int, ps: int, evaluator: bool, num_proc: int,
            hosts: str | None, chief_host: str | None, ps_hosts: str | None, ssh_port: int | None,
            ssh_identity_file: str | None, elastic: bool, min_np: int | None, max_np: int | None,
            network_interface: str | None, model: str | None, batch_size: int | None, probe_seconds: float,
            save_plan: str | None, bind_all: bool, grace: float, task_timeout: float,
            command: tuple[str, ...], optimizer: tuple[str, int] | None = None, embeddings: tuple = ()) -> None:
    """The command's body, with click's options; a Ctrl-C before the runners take over (during
    ``--backend auto``'s probe, say) exits 130 (``exit_on_interrupt``)."""
    import shutil

    from tfdist.launch.remote import SshOptions

    _reject_foreign_options(ctx, backend)
    try:
        check_host_options(hosts, chief_host, ps_hosts)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    if network_interface is not None and not network_interface.strip():
        raise click.UsageError("--network-interface is empty; fix: name the interface the ranks talk over, "
                               "e.g. --network-interface eth0, or drop --network-interface")
    if network_interface is not None:
        try:
            check_network_interface(network_interface, field="")
        except LaunchError as exc:
            raise click.BadParameter(str(exc), param_hint="'--network-interface'") from None
    if backend == AUTO:
        hosts = hosts_or_allocation(hosts)
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
        if _given(ctx, "workers"):
            _check(check_cluster_size, workers, ps)
        backend, hosts, workers, plan = _choose_backend(ctx, hosts, workers, ps, model, batch_size, ssh,
                                                        probe_seconds, optimizer, embeddings)
        if plan is not None:
            environ, result_path = _apply_plan(plan, save_plan, environ)
    if backend == "horovod":
        given_np = num_proc if _given(ctx, "num_proc") else None
        num_proc = _check(horovod_ranks, hosts, given_np, elastic, min_np, max_np, default=num_proc)
        code = _launch_horovod(ctx, command, num_proc, hosts, ssh, elastic, min_np, max_np, grace,
                               network_interface, environ)
    else:
        peers = backend == "multi_worker_mirrored"
        _check(check_cluster_size, workers, 0 if peers else ps, evaluator, chief=not peers)
        if hosts is not None:
            _check(check_placement, hosts, workers, 0 if peers else ps, evaluator, chief=not peers,
                   chief_host=chief_host, ps_hosts=ps_hosts)
        code = _launch_tf_cluster(backend, command, workers, ps, evaluator, hosts, chief_host, ps_hosts,
                                  ssh, bind_all, grace, task_timeout, environ)
    if plan is not None:
        from tfdist.plan import result_summary

        _report(result_summary(plan, result_path))
    raise SystemExit(code)



def _apply_plan(plan, save_path: str | None, environ: dict[str, str]) -> tuple[dict[str, str], str]:
    """Print and save ``plan``; the tasks' environment with it inline, and where the chief writes its
    measured figures (beside the saved plan)."""
    from tfdist.plan import PlanError, default_plan_path, plan_environment, save_plan

    path = save_path or default_plan_path()
    try:
        save_plan(plan, path)
    except (OSError, PlanError) as exc:
        raise click.ClickException(f"cannot save the plan to {path!r} ({exc}); fix: pass --save-plan with a "
                                   "writable path") from None
    result_path = os.path.abspath(path.removesuffix(".json") + ".measured.json")
    _report(f"{plan.describe()}\ntfdist launch --backend auto: the plan is saved to {path}; every task gets it "
            "in TFDIST_PLAN")
    return {**environ, **plan_environment(plan, result_path)}, result_path


def _shown(text: str, limit: int = 80) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _check(check, *args, **kwargs):
    """Call a check of :mod:`tfdist.launch.checks`; its LaunchError is a usage error (exit 2)."""
    try:
        return check(*args, **kwargs)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None


def _check_auto(ctx: click.Context, hosts: str | None) -> None:
    """--backend auto needs --hosts (it compares links between hosts), --model and --batch-size."""
    if hosts is None:
        raise click.UsageError("--backend auto needs --hosts: it compares the link rates between hosts; fix: "
                               "add --hosts h1:1,h2:1,... (inside a SLURM allocation its nodes stand in), "
                               "or on one machine pick --backend "
                               "parameter_server, multi_worker_mirrored or horovod")
    for name, example in (("model", "--model models:build_model"), ("batch_size", "--batch-size 64")):
        if not _given(ctx, name):
            raise click.UsageError(f"--backend auto needs {_FLAGS[name]} to time a step on each worker host; "
                                   f"fix: add e.g. {example}")


def _choose_backend(ctx: click.Context, hosts: str, workers: int, ps: int, model: str,
                    batch_size: int, ssh, probe_seconds: float,
                    optimizer: tuple[str, int] | None = None,
                    embeddings: tuple = ()) -> tuple[str, str, int, object]:
    """--backend auto: probe, advise, print the advice to stderr; ``(backend, hosts, workers, plan)``
    to launch. horovod and multi_worker_mirrored get only the hosts that the placement gives workers.
    With ``optimizer`` the probed memory is checked: a backend that would not fit is not chosen, and
    when none fits nothing is launched (a usage error with the numbers)."""
    from tfdist.advise import AdviseError
    from tfdist.advise import advise as advise_cluster
    from tfdist.advise.inputs import build_inputs, memory_check
    from tfdist.advise.planner import plan_from_advice
    from tfdist.advise.probe import default_workers, probe_hosts
    from tfdist.advise.render import render, render_measured
    from tfdist.launch.hosts import parse_hosts, place_tasks

    try:
        slots = parse_hosts(hosts)
        if not _given(ctx, "workers"):
            workers = default_workers(slots, ps)
        found = probe_hosts(hosts, workers, ps, model=model, batch_size=batch_size, options=ssh,
                            seconds=probe_seconds, log=_report)
        cluster, workload, _ = build_inputs(found, workers, ps, batch_size, embeddings=embeddings)
        memory = memory_check(cluster, workload, optimizer, found=found)
        advice = advise_cluster(cluster, workload, memory)
        placed = place_tasks(slots, workers, ps)
    except AdviseError as exc:  # the tables are the one value of the advice that launch's user gave
        raise click.UsageError(f"--embedding: {exc}" if exc.field == "embeddings" else str(exc)) from None
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    _report(render_measured(found) + "\n\n" + render(advice, cluster, workload))
    backend = advice.recommended
    if backend != "parameter_server":
        from collections import Counter

        counts = Counter(p.host for p in placed if p.task_type == "worker")
        hosts = ",".join(f"{host}:{n}" for host, n in counts.items())
    _report(f"tfdist launch --backend auto: launching {backend} ({advice.variant}) on {hosts}")
    return backend, hosts, workers, plan_from_advice(advice, cluster, workload)


def _report(message: str) -> None:
    click.echo(message, err=True)


def _launch_horovod(ctx: click.Context, command: tuple[str, ...], num_proc: int, hosts: str | None, ssh,
                    elastic: bool, min_np: int | None, max_np: int | None, grace: float,
                    network_interface: str | None, environ: dict[str, str] | None = None) -> int:
    """Find horovodrun (``tfdist.launch.plan.horovod_launcher``: Horovod's own launcher run by this
    interpreter, else the horovodrun script) and run it (in ``environ``, default this process's); its
    exit code."""
    from tfdist.launch.local import run_command
    from tfdist.launch.plan import horovod_launcher

    horovodrun = horovod_launcher()
    if horovodrun is None:
        raise click.UsageError(f"horovodrun is neither beside {sys.executable} nor on PATH; fix: run "
                               "`make setup` and use .venv/bin/tfdist, or install Horovod with "
                               "TensorFlow and Gloo")
    try:
        import functools

        return _run_horovod(ctx, command, num_proc, hosts, ssh, elastic, min_np, max_np, horovodrun, grace,
                            functools.partial(run_command, env=environ), network_interface)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None


def _launch_tf_cluster(backend: str, command: tuple[str, ...], workers: int, ps: int, evaluator: bool,
                       hosts: str | None, chief_host: str | None, ps_hosts: str | None, ssh, bind_all: bool,
                       grace: float, task_timeout: float, environ: dict[str, str] | None = None) -> int:
    """A parameter_server or multi_worker_mirrored cluster, here or on ``hosts``, its tasks started in
    ``environ`` (default this process's); the chief's exit code."""
    environ = user_environment() if environ is None else environ
    from tfdist.cluster import free_ports
    from tfdist.launch.bind import BindShimError, shim_library
    from tfdist.launch.local import report_to_stderr, run_local_cluster
    from tfdist.launch.policy import ParameterServerPolicy, PeerPolicy
    from tfdist.launch.host_cluster import prepare_host_cluster

    try:
        shim = None if bind_all or hosts is not None else shim_library()
        if hosts is not None:
            peers = backend == "multi_worker_mirrored"
            _, tasks = prepare_host_cluster(command, hosts, workers, 0 if peers else ps, environ,
                                            os.getcwd(), evaluator=evaluator, chief=not peers,
                                            chief_host=chief_host, ps_hosts=ps_hosts, options=ssh,
                                            bind=not bind_all, grace=grace)
        elif backend == "multi_worker_mirrored":
            ports = free_ports(workers)
            _, tasks = plan_worker_cluster(command, workers, ports, environ, bind_shim=shim)
        else:
            ports = free_ports(1 + workers + ps + int(evaluator))
            _, tasks = plan_local_cluster(command, workers, ps, ports, environ, evaluator=evaluator,
                                          bind_shim=shim)
    except (LaunchError, BindShimError) as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:  # e.g. EMFILE: more ports than this process may open
        raise click.UsageError(f"cannot reserve the cluster's ports on this machine, nothing was started "
                               f"({exc.strerror or exc}); fix: launch fewer tasks, or raise the open-file "
                               "limit (ulimit -n)") from None
    except KeyboardInterrupt:  # Ctrl-C while checking the hosts: nothing was started yet
        report_to_stderr("interrupted before any task started")
        return 130
    if backend == "multi_worker_mirrored":
        policy = PeerPolicy(task.name for task in tasks)
    else:
        policy = ParameterServerPolicy((task.name for task in tasks), timeout=task_timeout)
    if bind_all:
        report_to_stderr("warning: --bind-all: the servers listen on every interface and the gRPC runtime "
                         "has no authentication; anyone who reaches these ports can run code in them")
    if hosts is not None:
        where = "every interface" if bind_all else "its host's address only"
        report_to_stderr(f"{', '.join(f'{task.name} on {task.address}' for task in tasks)}; each server "
                         f"listens on {where}")
    else:
        where = "every interface, ports" if bind_all else "127.0.0.1 ports"
        report_to_stderr(f"{', '.join(task.name for task in tasks)} on {where} {', '.join(map(str, ports))}")
    try:
        return run_local_cluster(tasks, policy, grace=grace)
    except OSError as exc:  # a task could not be started (EMFILE, EAGAIN, ...); the started ones are stopped
        raise click.ClickException(f"cannot start every task ({exc.strerror or exc}); the tasks already "
                                   "started were stopped; fix: launch fewer tasks on this machine, or raise "
                                   "its limits (ulimit -n, ulimit -u)") from None


def _run_horovod(ctx: click.Context, command: tuple[str, ...], num_proc: int, hosts: str | None,
                 ssh, elastic: bool, min_np: int | None, max_np: int | None, horovodrun: list[str],
                 grace: float, run_command, network_interface: str | None = None) -> int:
    """horovodrun (elastic or not) with -H/-p/-i and ``num_proc`` ranks (checked and defaulted by
    ``tfdist.launch.checks.horovod_ranks``). With --hosts, horovodrun's ssh is tfdist's wrapper
    (``tfdist.launch.ssh_wrapper``: host keys checked, keepalives, every rank supervised so it
    stops with the launcher), installed in a temporary directory removed afterwards. When horovodrun
    fails, the last line says why (``tfdist.launch.horovod_output``); its own output stays above."""
    import shutil
    import tempfile
    from pathlib import Path

    from tfdist.launch.horovod_output import explain_failure

    if hosts is None:
        argv = horovodrun_command(command, num_proc, hosts, horovodrun=horovodrun, ssh_port=ssh.port,
                                  ssh_identity_file=ssh.identity_file, network_interface=network_interface)
        return run_command(argv, grace=grace, name="horovodrun", explain=explain_failure)
    from tfdist.launch.elastic import elastic_horovodrun_command, with_ssh_wrapper

    workdir = Path(tempfile.mkdtemp(prefix="tfdist-horovod-"))
    try:
        if elastic:
            argv = elastic_horovodrun_command(command, hosts, min_np, max_np,
                                              num_proc if _given(ctx, "num_proc") else None, workdir,
                                              ssh_port=ssh.port, ssh_identity_file=ssh.identity_file,
                                              horovodrun=horovodrun, network_interface=network_interface)
        else:
            static = horovodrun_command(command, num_proc, hosts, horovodrun=horovodrun, ssh_port=ssh.port,
                                        ssh_identity_file=ssh.identity_file,
                                        network_interface=network_interface)
            argv = with_ssh_wrapper(static, workdir)
        return run_command(argv, grace=grace, name="horovodrun", explain=explain_failure)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
