"""The launcher's side of ``tfdist launch --hosts``: ssh command lines, forwarded environment, task
specifications and the per-host preflight. Everything but ``run_preflight`` is pure.

Each task runs as ``ssh [-p P] [-i KEY] -o BatchMode=yes ... HOST <python> -m
tfdist.launch.remote_task``, with its specification (``TaskSpec``) written to the ssh client's
stdin as one JSON line, then a heartbeat every few seconds; ``tfdist.launch.remote_task`` on the
host starts the task and stops it when that stdin ends or the heartbeats stop (a cut link, a
vanished launcher host). A host that is this very machine (its name resolves to an address of this
machine) runs the same supervisor without ssh, as ``horovodrun`` does.

``<python>`` is this interpreter's path: every host needs the same venv at the same path.
"""
from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

from tfdist.launch.errors import LaunchError
from tfdist.launch.processes import SSH_EXIT_FAILED

SUPERVISOR = "tfdist.launch.remote_task"
SERVER_ALIVE_INTERVAL = 5  # s; the ssh client gives up after interval x count silent seconds
SERVER_ALIVE_COUNT = 3
CONNECT_TIMEOUT = 15  # s
PREFLIGHT_TIMEOUT = 120.0  # s: the first preflight on a host may compile the bind shim
# Not forwarded to remote tasks: they describe the launcher's host or shell, not the job. Horovod's
# runner drops BASH_FUNC_*, OLDPWD, *CUDA_VISIBLE_DEVICES and its secret key; tfdist also drops the
# shell's bookkeeping and what it sets per task itself.
_NOT_FORWARDED = re.compile(r"(BASH_FUNC_.*|OLDPWD|PWD|HOSTNAME|SHLVL|_|SSH_.*|.*CUDA_VISIBLE_DEVICES"
                            r"|HOROVOD_SECRET_KEY|TF_CONFIG|TFDIST_BIND_.*|DISPLAY|XAUTHORITY|TERM"
                            r"|XDG_RUNTIME_DIR|XDG_SESSION_.*|DBUS_SESSION_BUS_ADDRESS|MAIL|LS_COLORS"
                            r"|PS1|PROMPT_COMMAND|TMUX|TMUX_PANE|STY|WINDOW)\Z")


class RemoteLaunchError(LaunchError):
    """A host the launcher cannot start tasks on; the message names the host and the fix."""


@dataclass(frozen=True)
class SshOptions:
    """How to reach the hosts: ``--ssh-port`` and ``--ssh-identity-file`` (as in horovodrun)."""

    port: int | None = None
    identity_file: str | None = None


@dataclass(frozen=True)
class TaskSpec:
    """What the supervisor on the host needs to start one task (sent as one JSON line on stdin)."""

    name: str
    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] = field(repr=False)
    bind: tuple[str, int] | None  # (host name as in --hosts, port) for the bind shim; None: --bind-all
    grace: float

    def encode(self) -> bytes:
        """One JSON line (ends with a newline)."""
        bind = None if self.bind is None else {"host": self.bind[0], "port": self.bind[1]}
        spec = {"name": self.name, "argv": list(self.argv), "cwd": self.cwd, "env": dict(self.env),
                "bind": bind, "grace": self.grace}
        return (json.dumps(spec, separators=(",", ":")) + "\n").encode()


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's environment minus what belongs to its own host or shell (see ``_NOT_FORWARDED``)."""
    return {key: value for key, value in environ.items() if not _NOT_FORWARDED.match(key)}


def ssh_command(host: str, remote: Sequence[str], options: SshOptions = SshOptions(),
                connect_timeout: int = CONNECT_TIMEOUT) -> list[str]:
    """``ssh ... HOST 'REMOTE'``: never prompts (BatchMode), gives up on a silent server after
    ``SERVER_ALIVE_INTERVAL`` x ``SERVER_ALIVE_COUNT`` s; ``remote`` is quoted for the remote shell."""
    argv = ["ssh"]
    if options.port is not None:
        argv += ["-p", str(options.port)]
    if options.identity_file is not None:
        argv += ["-i", options.identity_file]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}",
             "-o", f"ServerAliveInterval={SERVER_ALIVE_INTERVAL}",
             "-o", f"ServerAliveCountMax={SERVER_ALIVE_COUNT}",
             "-o", "LogLevel=ERROR", host, shlex.join(remote)]
    return argv


def is_local_host(host: str) -> bool:
    """Whether ``host`` is this machine: it resolves to an address a socket here can bind."""
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def supervisor_command(host: str, local: bool, options: SshOptions, python: str | None = None,
                       extra: Sequence[str] = ()) -> list[str]:
    """The command that runs the supervisor on ``host``: over ssh, or directly when ``local``."""
    remote = [python or sys.executable, "-m", SUPERVISOR, *extra]
    return remote if local else ssh_command(host, remote, options)


def describe_failure(host: str, returncode: int, output: str, python: str) -> str:
    """What a failed preflight (or supervisor) on ``host`` means, and the fix."""
    tail = output.strip().splitlines()[-1] if output.strip() else "no output"
    if returncode == SSH_EXIT_FAILED:
        return (f"ssh to {host} failed ({tail}); fix: make `ssh {host} true` work without a password "
                "(ssh-copy-id, --ssh-identity-file, --ssh-port) and the host key known")
    if returncode == 127 or "No such file or directory" in tail:
        return (f"{python} does not exist on {host} ({tail}); fix: install the same venv at the same path "
                "on every host")
    if "No module named" in output:
        return (f"{python} on {host} has no tfdist ({tail}); fix: install tfdist in the venv at {python} on "
                "every host (the same version)")
    return f"checking {host} failed with exit code {returncode} ({tail}); fix: run it by hand to see why"


def preflight_arguments(count: int, host: str, shim: bool, cwd: str | None = None,
                        command: str | None = None, path: str | None = None) -> list[str]:
    """The supervisor's ``--preflight`` arguments for ``host``: free ports, the bind address, the
    shim, and that the working directory and the task's command (on ``path``, the PATH the tasks
    get) exist there."""
    extra = ["--preflight", str(count), "--host", host, *(["--shim"] if shim else [])]
    if cwd is not None:
        extra += ["--cwd", cwd]
    if command is not None:
        extra += ["--command", command]
    if path is not None:
        extra += ["--path", path]
    return extra


def run_preflight(hosts: Mapping[str, int], options: SshOptions, shim: bool,
                  local_hosts: Collection[str] = (), python: str | None = None,
                  timeout: float = PREFLIGHT_TIMEOUT, cwd: str | None = None, command: str | None = None,
                  path: str | None = None) -> dict[str, dict[str, Any]]:
    """On every host at once: ``{host: {"ports": [...], "address": ...}}`` with ``hosts[host]`` free
    ports, after checking there the working directory ``cwd`` and that ``command`` (a task's
    argv[0]) is found on ``path``. Raises ``RemoteLaunchError`` listing every host that failed,
    with the fix (nothing has been started then)."""
    python = python or sys.executable

    def check(host: str) -> tuple[str, dict[str, Any] | str]:
        extra = preflight_arguments(hosts[host], host, shim, cwd, command, path)
        argv = supervisor_command(host, host in local_hosts, options, python, extra)
        try:
            result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                    timeout=timeout)
        except subprocess.TimeoutExpired:
            return host, (f"checking {host} took more than {timeout:.0f} s; fix: check that "
                          f"`ssh {host} true` returns at once")
        except OSError as exc:
            return host, f"cannot run {argv[0]!r} ({exc}); fix: install OpenSSH's client (ssh)"
        if result.returncode != 0:
            return host, describe_failure(host, result.returncode, result.stderr or result.stdout, python)
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return host, (f"{host} answered {result.stdout.strip()[-200:]!r} instead of the check's result; "
                          "fix: make the login shell on that host print nothing for a non-interactive ssh")
        if answer.get("error"):
            return host, f"{host}: {answer['error']}"
        return host, answer

    with ThreadPoolExecutor(max_workers=min(16, len(hosts)) or 1) as pool:
        results = dict(pool.map(check, list(hosts)))
    failures = [message for message in results.values() if isinstance(message, str)]
    if failures:
        raise RemoteLaunchError("cannot start the job, nothing was started: " + " | ".join(failures))
    return {host: answer for host, answer in results.items() if isinstance(answer, dict)}
