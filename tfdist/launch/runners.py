"""One runner per launcher of :mod:`tfdist.launch.backends`: a tf.distribute cluster of processes
(:data:`~tfdist.launch.backends.TF_CLUSTER`) or horovodrun (:data:`~tfdist.launch.backends.HOROVODRUN`).

Each checks nothing the CLI already checked: it builds the tasks (:mod:`tfdist.launch.commands`,
:mod:`tfdist.launch.host_cluster`) or horovodrun's argv, then starts them (:mod:`tfdist.launch.local`)
and returns the job's exit code. Problems before anything started are a :class:`LaunchError` (a usage
error, exit 2); a task that cannot be started is a :class:`StartError` (the tasks already started are
stopped first). May import the rest of :mod:`tfdist.launch`, :mod:`tfdist.cluster` and
:mod:`tfdist.errors`.

    code = run_tf_cluster(backend_named("parameter_server"), ["python", "train.py"], workers=2, ps=1)
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import tfdist.cluster
from tfdist.errors import TfdistError
from tfdist.launch import local
from tfdist.launch import commands as task_commands
from tfdist.launch.backends import Backend
from tfdist.launch.bind import BindShimError, shim_library
from tfdist.launch.elastic import elastic_horovodrun_command, with_ssh_wrapper
from tfdist.launch.errors import LaunchError
from tfdist.launch.host_cluster import prepare_host_cluster
from tfdist.launch.horovod_output import explain_failure
from tfdist.launch.policy import DEFAULT_TASK_TIMEOUT, ParameterServerPolicy, PeerPolicy
from tfdist.launch.remote import SshOptions

__all__ = ["StartError", "run_horovodrun", "run_tf_cluster"]


class StartError(TfdistError, RuntimeError):
    """A task could not be started (EMFILE, EAGAIN, ...); the ones already started were stopped."""


def run_tf_cluster(backend: Backend, command: Sequence[str], workers: int, ps: int = 0, evaluator: bool = False,
                   hosts: str | None = None, chief_host: str | None = None, ps_hosts: str | None = None,
                   ssh: SshOptions = SshOptions(), bind_all: bool = False, grace: float = local.GRACE_SECONDS,
                   task_timeout: float = DEFAULT_TASK_TIMEOUT, environ: Mapping[str, str] | None = None,
                   finished: Callable[[], bool] | None = None) -> int:
    """A cluster of ``backend`` (a chief and ps tasks, or peers), here or on ``hosts``, its tasks started in
    ``environ`` (default this process's); the chief's exit code (130 when interrupted before any task
    started; 0 once ``finished()``, polled, says the work is done: see ``local.run_local_cluster``)."""
    environ = dict(os.environ) if environ is None else environ
    ps = ps if backend.ps else 0
    try:
        shim = None if bind_all or hosts is not None else shim_library()
        if hosts is not None:
            _, tasks = prepare_host_cluster(command, hosts, workers, ps, environ, os.getcwd(), evaluator=evaluator,
                                            chief=backend.chief, chief_host=chief_host, ps_hosts=ps_hosts,
                                            options=ssh, bind=not bind_all, grace=grace)
        elif backend.chief:
            ports = tfdist.cluster.free_ports(1 + workers + ps + int(evaluator))
            _, tasks = task_commands.plan_local_cluster(command, workers, ps, ports, environ, evaluator=evaluator,
                                                        bind_shim=shim)
        else:
            ports = tfdist.cluster.free_ports(workers)
            _, tasks = task_commands.plan_worker_cluster(command, workers, ports, environ, bind_shim=shim)
    except BindShimError as exc:
        raise LaunchError(str(exc)) from None
    except OSError as exc:  # e.g. EMFILE: more ports than this process may open
        raise LaunchError(f"cannot reserve the cluster's ports on this machine, nothing was started "
                          f"({exc.strerror or exc}); fix: launch fewer tasks, or raise the open-file "
                          "limit (ulimit -n)") from None
    except KeyboardInterrupt:  # Ctrl-C while checking the hosts: nothing was started yet
        local.report_to_stderr("interrupted before any task started")
        return 130
    names = [task.name for task in tasks]
    policy = ParameterServerPolicy(names, timeout=task_timeout) if backend.chief else PeerPolicy(names)
    if bind_all:
        local.report_to_stderr("warning: --bind-all: the servers listen on every interface and the gRPC runtime "
                               "has no authentication; anyone who reaches these ports can run code in them")
    if hosts is not None:
        where = "every interface" if bind_all else "its host's address only"
        local.report_to_stderr(f"{', '.join(f'{task.name} on {task.address}' for task in tasks)}; each server "
                               f"listens on {where}")
    else:
        where = "every interface, ports" if bind_all else "127.0.0.1 ports"
        local.report_to_stderr(f"{', '.join(names)} on {where} {', '.join(map(str, ports))}")
    try:
        return local.run_local_cluster(tasks, policy, grace=grace, finished=finished)
    except OSError as exc:  # a task could not be started (EMFILE, EAGAIN, ...); the started ones are stopped
        raise StartError(f"cannot start every task ({exc.strerror or exc}); the tasks already started were "
                         "stopped; fix: launch fewer tasks on this machine, or raise its limits (ulimit -n, "
                         "ulimit -u)") from None


def run_horovodrun(command: Sequence[str], num_proc: int, hosts: str | None = None, ssh: SshOptions = SshOptions(),
                   elastic: bool = False, min_np: int | None = None, max_np: int | None = None,
                   given_np: int | None = None, grace: float = local.GRACE_SECONDS,
                   network_interface: str | None = None, environ: Mapping[str, str] | None = None,
                   run: Callable[..., int] | None = None, finished: Callable[[], bool] | None = None) -> int:
    """horovodrun (elastic or not) with -H/-p/-i and ``num_proc`` ranks (checked and defaulted by
    ``tfdist.launch.checks.horovod_ranks``; ``given_np``: the ``-np`` the user gave, for elastic), run by
    ``run`` (default :func:`tfdist.launch.local.run_command`) in ``environ``; its exit code.

    horovodrun is Horovod's own launcher run by this interpreter, else the horovodrun script
    (:func:`tfdist.launch.commands.horovod_launcher`). With ``hosts``, horovodrun's ssh is tfdist's wrapper
    (``tfdist.launch.ssh_wrapper``: host keys checked, keepalives, every rank supervised so it stops with
    the launcher), installed in a temporary directory removed afterwards. When horovodrun fails, the
    last line says why (``tfdist.launch.horovod_output``); its own output stays above. ``finished``:
    as in ``local.run_command``."""
    horovodrun = task_commands.horovod_launcher()
    if horovodrun is None:
        raise LaunchError(f"horovodrun is neither beside {sys.executable} nor on PATH; fix: run "
                          "`make setup` and use .venv/bin/tfdist, or install Horovod with TensorFlow and Gloo")
    run = run or local.run_command

    def start(argv: list[str]) -> int:
        extra = {} if finished is None else {"finished": finished}
        return run(argv, grace=grace, name="horovodrun", explain=explain_failure, env=environ, **extra)

    static = dict(horovodrun=horovodrun, ssh_port=ssh.port, ssh_identity_file=ssh.identity_file,
                  network_interface=network_interface)
    if hosts is None:
        return start(task_commands.horovodrun_command(command, num_proc, hosts, **static))
    workdir = Path(tempfile.mkdtemp(prefix="tfdist-horovod-"))
    try:
        if elastic:
            return start(elastic_horovodrun_command(command, hosts, min_np, max_np, given_np, workdir, **static))
        return start(with_ssh_wrapper(task_commands.horovodrun_command(command, num_proc, hosts, **static), workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

