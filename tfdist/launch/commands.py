"""The processes a launch starts: which commands, with which environment (TF_CONFIG per task, horovodrun's argv).

Pure functions: nothing is started here and no input is mutated, so they are tested without
TensorFlow or subprocesses. ``tfdist.launch.local`` starts them.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

from tfdist.cluster import Address, ClusterSpec, local_cluster, tf_config_for
from tfdist.cluster.tf_config import TF_CONFIG_ENV, grpc_task_env
from tfdist.launch.errors import LaunchError  # noqa: F401  (also imported from here)

if TYPE_CHECKING:
    from tfdist.launch.hosts import Placement
    from tfdist.launch.remote import SshOptions


@dataclass(frozen=True)
class TaskProcess:
    """One process of a local cluster: its task, command and full environment."""

    task_type: str
    index: int
    command: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False)
    address: str | None = None  # HOST:PORT of its server, for the launcher to see it listening
    host: str | None = None  # the --hosts entry it runs on (None: this machine, without a supervisor)
    stdin: bytes | None = field(default=None, repr=False)  # written to its stdin, which then stays open
    ssh: bool = False  # started over ssh: exit code 255 means ssh failed or the connection dropped

    @property
    def name(self) -> str:
        return f"{self.task_type}:{self.index}"

    @property
    def label(self) -> str:
        """The prefix of its output lines: ``worker:1``, or ``worker:1@h2`` on a host of --hosts."""
        return self.name if self.host is None else f"{self.name}@{self.host}"




def plan_local_cluster(command: Sequence[str], workers: int, ps: int, ports: Sequence[int],
                       base_env: Mapping[str, str], evaluator: bool = False, host: str = "127.0.0.1",
                       bind_shim: Path | None = None) -> tuple[ClusterSpec, list[TaskProcess]]:
    """A chief, ``workers`` workers, ``ps`` parameter servers (and an evaluator) on ``host``.

    Every task gets ``base_env`` plus its TF_CONFIG and ``GRPC_FAIL_FAST=use_caller``; with
    ``bind_shim`` (see ``tfdist.launch.bind``) also the variables that keep its server on ``host``.
    """
    if not command:
        raise LaunchError("no command to launch; fix: put it after `--`, e.g. "
                          "`tfdist launch --workers 2 --ps 1 -- python train.py`")
    if workers < 1:
        raise LaunchError(f"--workers is {workers}; a parameter-server cluster needs at least one "
                          "worker; fix: --workers 1 or more")
    if ps < 1:
        raise LaunchError(f"--ps is {ps}; a parameter-server cluster needs at least one ps task; "
                          "fix: --ps 1 or more (for synchronous training use --backend horovod)")
    spec = local_cluster(workers=workers, ps=ps, ports=ports, host=host, chief=True, evaluator=evaluator)
    return spec, _task_processes(spec, command, base_env, bind_shim)


def plan_worker_cluster(command: Sequence[str], workers: int, ports: Sequence[int],
                        base_env: Mapping[str, str], host: str = "127.0.0.1",
                        bind_shim: Path | None = None) -> tuple[ClusterSpec, list[TaskProcess]]:
    """``workers`` peer workers and no ps (MultiWorkerMirroredStrategy); worker 0 acts as chief."""
    if not command:
        raise LaunchError("no command to launch; fix: put it after `--`, e.g. "
                          "`tfdist launch --backend multi_worker_mirrored --workers 2 -- python train.py`")
    if workers < 1:
        raise LaunchError(f"--workers is {workers}; fix: --workers 1 or more")
    spec = local_cluster(workers=workers, ps=0, ports=ports, host=host, chief=False)
    return spec, _task_processes(spec, command, base_env, bind_shim)


def task_env(spec: ClusterSpec, task_type: str, index: int, base_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of one task of ``spec``, on this machine or on a host: ``base_env`` plus its
    TF_CONFIG and the gRPC variables (``tfdist.cluster.tf_config.grpc_task_env``: fail fast, and
    keepalive options merged into any the user set). ``base_env`` is not changed."""
    env = dict(base_env)
    env[TF_CONFIG_ENV] = json.dumps(tf_config_for(spec, task_type, index), separators=(",", ":"))
    env.update(grpc_task_env(env))
    return env


def _task_processes(spec: ClusterSpec, command: Sequence[str], base_env: Mapping[str, str],
                    bind_shim: Path | None) -> list[TaskProcess]:
    from tfdist.launch.bind import exact_bind_env

    processes = []
    for task_type, index in spec.tasks():
        env = task_env(spec, task_type, index, base_env)
        address = spec.address_of(task_type, index)
        if bind_shim is not None:
            env.update(exact_bind_env(address.host, [address.port], bind_shim, base_env))
        processes.append(TaskProcess(task_type, index, tuple(command), env, str(address)))
    return processes


def plan_host_cluster(command: Sequence[str], placements: Sequence[Placement],
                      ports: Mapping[str, Sequence[int]], base_env: Mapping[str, str], cwd: str,
                      options: SshOptions | None = None, bind: bool = True, grace: float = 5.0,
                      local_hosts: Collection[str] = (), python: str | None = None,
                      ) -> tuple[ClusterSpec, list[TaskProcess]]:
    """The tasks of ``placements`` (``tfdist.launch.hosts.place_tasks``) on their hosts, each run by
    the supervisor ``tfdist.launch.remote_task`` over ssh (directly on ``local_hosts``).

    ``ports[host]`` are free ports on that host (the preflight's), taken in task order. TF_CONFIG
    names the hosts as ``--hosts`` does. Every task gets ``base_env`` minus the launcher's
    host-specific variables (``tfdist.launch.remote.forwarded_env``), its TF_CONFIG,
    ``GRPC_FAIL_FAST=use_caller`` and gRPC keepalive pings (``task_env``); with ``bind`` the
    supervisor adds the bind shim's variables on the host. The ssh client itself runs with
    ``base_env``; a supervisor on one of ``local_hosts`` with the forwarded variables only (the
    task then gets the same environment as on any other host).
    """
    from tfdist.launch.remote import SshOptions, TaskSpec, forwarded_env, supervisor_command

    if not command:
        raise LaunchError("no command to launch; fix: put it after `--`, e.g. "
                          "`tfdist launch --hosts h1:2,h2:2 --workers 2 --ps 1 -- python train.py`")
    options = options or SshOptions()
    free = {host: list(host_ports) for host, host_ports in ports.items()}
    lists: dict[str, list[Address]] = {}
    for placement in placements:
        if not free.get(placement.host):
            raise LaunchError(f"no free port left for {placement.name} on {placement.host}; fix: pass one "
                              "port per task placed on each host")
        lists.setdefault(placement.task_type, []).append(Address(placement.host, free[placement.host].pop(0)))
    spec = ClusterSpec(**lists)
    forwarded = forwarded_env(base_env)
    processes = []
    for placement in placements:
        env = task_env(spec, placement.task_type, placement.index, forwarded)
        address = spec.address_of(placement.task_type, placement.index)
        bind_to = (address.host, address.port) if bind else None
        task = TaskSpec(placement.name, tuple(command), cwd, env, bind_to, grace)
        local = placement.host in local_hosts
        # The ssh client needs the launcher's own variables (SSH_AUTH_SOCK); a supervisor on this very
        # host gets only what is forwarded, like one that sshd starts, so its task's env is the same.
        processes.append(TaskProcess(placement.task_type, placement.index,
                                     tuple(supervisor_command(placement.host, local, options, python)),
                                     dict(forwarded if local else base_env), str(address),
                                     host=placement.host, stdin=task.encode(), ssh=not local))
    return spec, processes


def horovodrun_command(command: Sequence[str], np: int, hosts: str | None = None,
                       horovodrun: str | Sequence[str] | None = None, ssh_port: int | None = None,
                       ssh_identity_file: str | None = None,
                       network_interface: str | None = None) -> list[str]:
    """``horovodrun -np N -H localhost:N --gloo COMMAND`` (or the given ``-H`` hosts, with
    horovodrun's ``-p SSH_PORT``, ``-i SSH_IDENTITY_FILE`` and ``--network-interface`` when given).
    ``horovodrun`` is the launcher's own argv (``launcher_argv``; default ``horovod_launcher()``)."""
    if not command:
        raise LaunchError("no command to launch; fix: "
                          "`tfdist launch --backend horovod -np 2 -- python train.py`")
    if np < 1:
        raise LaunchError(f"-np is {np}; fix: -np 1 or more")
    nic = [] if network_interface is None else ["--network-interface", network_interface]
    ssh = [*(["-p", str(ssh_port)] if ssh_port is not None else []),
           *(["-i", ssh_identity_file] if ssh_identity_file is not None else [])]
    return [*launcher_argv(horovodrun), *nic, "-np", str(np), "-H", hosts or f"localhost:{np}", *ssh,
            "--gloo", *command]


#: The module ``python -m`` runs in place of the ``horovodrun`` script (``tfdist.launch.horovod_launcher``:
#: the same argv and Horovod's own code, without the build check that imports TensorFlow).
HOROVOD_LAUNCHER = "tfdist.launch.horovod_launcher"


def horovod_launcher(executable: str | None = None, path: str | None = None) -> list[str] | None:
    """The argv that starts horovodrun: ``[PYTHON, "-m", HOROVOD_LAUNCHER]`` when ``executable``
    (default: this interpreter, which the import check asks) is a file that can import
    ``horovod.runner.launch`` (``find_spec``: no TensorFlow, no Horovod extension is loaded), else
    ``[find_horovodrun(...)]``; ``None`` when neither exists."""
    executable = executable or sys.executable
    if executable and os.path.isfile(executable) and os.access(executable, os.X_OK) \
            and _importable("horovod.runner.launch"):
        return [executable, "-m", HOROVOD_LAUNCHER]
    found = find_horovodrun(executable, path)
    return None if found is None else [found]


def launcher_argv(horovodrun: str | Sequence[str] | None) -> list[str]:
    """``horovodrun`` as an argv prefix: a path is one word, a sequence is kept, ``None`` is
    ``horovod_launcher()`` (or the bare word ``horovodrun``, for an error from the shell)."""
    if horovodrun is None:
        return horovod_launcher() or ["horovodrun"]
    return [horovodrun] if isinstance(horovodrun, str) else list(horovodrun)


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def find_horovodrun(executable: str | None = None, path: str | None = None) -> str | None:
    """``horovodrun`` beside the running interpreter (a venv's ``bin/``), else on ``path``.

    ``.venv/bin/tfdist`` runs without the venv activated, so its ``horovodrun`` is not on PATH;
    the one installed with this interpreter is also the one that matches its Horovod.
    """
    beside = os.path.join(os.path.dirname(executable or sys.executable), "horovodrun")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which("horovodrun", path=path)
