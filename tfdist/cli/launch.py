"""``tfdist launch``: start a local tf.distribute cluster, or a Horovod job via horovodrun."""
from __future__ import annotations

import os
import sys

import click
from click.core import ParameterSource

from tfdist.cli.strict import StrictCommand
from tfdist.launch.plan import LaunchError, horovodrun_command, plan_local_cluster, plan_worker_cluster
from tfdist.launch.policy import DEFAULT_TASK_TIMEOUT

BACKENDS = ("parameter_server", "multi_worker_mirrored", "horovod")
# which options each backend reads; giving another backend's option is an error, not ignored
_BACKEND_OPTIONS = {
    "parameter_server": {"workers", "ps", "evaluator", "bind_all", "task_timeout"},
    "multi_worker_mirrored": {"workers", "bind_all"},
    "horovod": {"num_proc", "hosts"},
}
_FLAGS = {"workers": "--workers", "ps": "--ps", "evaluator": "--evaluator", "num_proc": "-np", "hosts": "-H",
          "bind_all": "--bind-all", "task_timeout": "--task-timeout"}


def _reject_foreign_options(ctx: click.Context, backend: str) -> None:
    given = [name for name in _FLAGS
             if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
             and name not in _BACKEND_OPTIONS[backend]]
    if given:
        flags = ", ".join(_FLAGS[name] for name in given)
        raise click.UsageError(f"{flags} do(es) not apply to --backend {backend}; fix: drop "
                               f"{flags}, or pick the backend they belong to")


@click.command(cls=StrictCommand, context_settings={"allow_interspersed_args": False})
@click.option("--backend", type=click.Choice(BACKENDS), default="parameter_server", show_default=True,
              help="parameter_server: local chief, workers and ps; multi_worker_mirrored: local "
                   "peer workers; horovod: call horovodrun.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="parameter_server, multi_worker_mirrored: number of workers.")
@click.option("--ps", type=click.IntRange(min=1), default=1, show_default=True,
              help="parameter_server: number of parameter servers.")
@click.option("--evaluator", is_flag=True, help="parameter_server: add a sidecar evaluator task.")
@click.option("-np", "--num-proc", "num_proc", type=click.IntRange(min=1), default=2, show_default=True,
              help="horovod: number of ranks.")
@click.option("-H", "--hosts", help="horovod: horovodrun's -H, e.g. host1:2,host2:2 (default localhost:NP).")
@click.option("--bind-all", is_flag=True,
              help="Let TensorFlow's servers listen on every interface (its default) instead of only "
                   "on 127.0.0.1. The gRPC runtime has no authentication.")
@click.option("--grace", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds between the stop signal and SIGKILL when tearing tasks down.")
@click.option("--task-timeout", type=click.FloatRange(min=0), default=DEFAULT_TASK_TIMEOUT, show_default=True,
              help="parameter_server: seconds the chief gets to exit by itself after the job lost a "
                   "task it cannot go on without (a ps task, every worker, or a worker before it "
                   "served); then the launcher stops the job with exit code 1.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def launch(ctx: click.Context, backend: str, workers: int, ps: int, evaluator: bool, num_proc: int,
           hosts: str | None, bind_all: bool, grace: float, task_timeout: float,
           command: tuple[str, ...]) -> None:
    """Run COMMAND as every task of a local cluster; exit with the chief's exit code.

    \b
    tfdist launch --workers 2 --ps 1 -- python examples/classifier.py
    tfdist launch --backend multi_worker_mirrored --workers 2 -- python train.py
    tfdist launch --backend horovod -np 2 -- python examples/classifier.py

    Each task gets its own TF_CONFIG on free localhost ports and GRPC_FAIL_FAST=use_caller;
    output lines are prefixed with the task ([worker:1]) and every task's exit is printed. The
    job ends when the chief exits (with its exit code), on Ctrl-C, or --task-timeout seconds
    after it lost a task it cannot go on without; a worker lost mid-training is tolerated. Tasks
    die with the launcher, even when it is killed. TensorFlow's servers would listen on every
    interface; tfdist keeps them on 127.0.0.1 (an LD_PRELOAD shim, built once with the C
    compiler) unless --bind-all.
    """
    import shutil

    from tfdist.cluster import free_ports
    from tfdist.launch.bind import BindShimError, shim_library
    from tfdist.launch.local import report_to_stderr, run_command, run_local_cluster
    from tfdist.launch.plan import find_horovodrun
    from tfdist.launch.policy import ParameterServerPolicy, PeerPolicy

    _reject_foreign_options(ctx, backend)
    if shutil.which(command[0]) is None:
        raise click.BadParameter(f"{command[0]!r} is not an executable on PATH; fix: give the full "
                                 "path, e.g. `-- /usr/bin/python3 train.py`", param_hint="COMMAND")
    try:
        if backend == "horovod":
            horovodrun = find_horovodrun()
            if horovodrun is None:
                raise click.UsageError(f"horovodrun is neither beside {sys.executable} nor on PATH; fix: run "
                                       "`make setup` and use .venv/bin/tfdist, or install Horovod with "
                                       "TensorFlow and Gloo")
            argv = horovodrun_command(command, num_proc, hosts, horovodrun=horovodrun)
            raise SystemExit(run_command(argv, grace=grace))
        shim = None if bind_all else shim_library()
        if backend == "multi_worker_mirrored":
            ports = free_ports(workers)
            _, tasks = plan_worker_cluster(command, workers, ports, os.environ, bind_shim=shim)
            policy = PeerPolicy(task.name for task in tasks)
        else:
            ports = free_ports(1 + workers + ps + int(evaluator))
            _, tasks = plan_local_cluster(command, workers, ps, ports, os.environ, evaluator=evaluator,
                                          bind_shim=shim)
            policy = ParameterServerPolicy((task.name for task in tasks), timeout=task_timeout)
    except (LaunchError, BindShimError) as exc:
        raise click.UsageError(str(exc)) from None
    if bind_all:
        report_to_stderr("warning: --bind-all: the servers listen on every interface and the gRPC runtime "
                         "has no authentication; anyone who reaches these ports can run code in them")
    where = "every interface, ports" if bind_all else "127.0.0.1 ports"
    report_to_stderr(f"{', '.join(task.name for task in tasks)} on {where} {', '.join(map(str, ports))}")
    raise SystemExit(run_local_cluster(tasks, policy, grace=grace))
