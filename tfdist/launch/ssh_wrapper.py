"""The ``ssh`` that horovodrun runs: host keys checked, keepalives, and remote commands that end
with the launcher.

horovodrun reaches other hosts with ``ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no
HOST -p P -i K [-o ConnectTimeout=N] COMMAND`` (horovod/runner/util/remote.py), run through a
shell. ``install(workdir)`` writes ``workdir/bin/ssh``, a script that execs this module; with that
directory first on horovodrun's PATH every such call comes here, and ``main``

* runs the real ``ssh`` (the first one on PATH outside the wrapper's own directory) with
  ``WRAPPER_OPTIONS`` placed first: ssh keeps the first value it sees of an option, so host keys
  are checked (``StrictHostKeyChecking=yes`` beats Horovod's ``no``), nothing prompts, and a
  silent server is given up after ServerAliveInterval x ServerAliveCountMax seconds;
* replaces the remote command by ``<python> -m tfdist.launch.remote_task --shell 'COMMAND'``
  (this interpreter's path: the same venv on every host), which runs it under the same
  supervisor as a ``tfdist launch --hosts`` task: the command's output reaches this process's
  stdout and stderr, and the command is stopped (TERM, grace, KILL of its group) when ssh's
  stdin ends or its heartbeats stop;
* writes a heartbeat to ssh's stdin every ``HEARTBEAT_SECONDS`` (non-blocking), passes SIGTERM,
  SIGINT and SIGHUP on by closing that stdin (the supervisor stops the command) and then stopping
  ssh, and exits with ssh's exit code (the remote command's, or 255 when ssh failed).

A launcher killed outright takes the wrapper's ssh along (parent-death signal); the remote
supervisor then sees EOF, or on a cut link misses the heartbeats. Nothing here imports TensorFlow.

    bin_dir = install(Path(workdir))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    subprocess.run(["horovodrun", "-np", "4", "-H", "h1:2,h2:2", ...], env=env)
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from tfdist.errors import TfdistError, with_fix
from tfdist.launch.processes import (
    HEARTBEAT_SECONDS,
    SSH_EXIT_FAILED,
    Heartbeat,
    StopSignals,
    close_stdins,
    start_group,
    terminate,
)

SERVER_ALIVE_INTERVAL = 3  # s
SERVER_ALIVE_COUNT = 3
WRAPPER_OPTIONS = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                   "-o", f"ServerAliveInterval={SERVER_ALIVE_INTERVAL}",
                   "-o", f"ServerAliveCountMax={SERVER_ALIVE_COUNT}")
SUPERVISOR = "tfdist.launch.remote_task"
_MARKER = b"-m tfdist.launch.ssh_wrapper"
STOP_SECONDS = 3.0  # after a stop signal: how long ssh gets to end by itself (Horovod waits 5 s, then kills)
EXIT_USAGE = 2
# ssh's options that take an argument (OpenSSH 9, ssh.c getopt string); every other one is a flag.
_WITH_ARGUMENT = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
_FLAGS = frozenset("46AaCfGgKkMNnqsTtVvXxYy")


class SshWrapperError(TfdistError, ValueError):
    """An ssh command line the wrapper cannot rewrite; the message names the fix."""


def install(workdir: Path) -> Path:
    """Write an executable ``workdir/bin/ssh`` that runs this wrapper with this interpreter; the
    ``bin`` directory, to put first on horovodrun's PATH."""
    bin_dir = Path(workdir) / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "ssh"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m tfdist.launch.ssh_wrapper \"$@\"\n")
    script.chmod(0o755)
    return bin_dir


def split_ssh_argv(argv: Sequence[str]) -> tuple[list[str], str, list[str]]:
    """``ssh``'s arguments (without ``ssh``) as (options, host, command words), the way OpenSSH
    parses them: options may come before and after the host, ``--`` ends them."""
    options: list[str] = []
    host: str | None = None
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            index += 1
            if host is None and index < len(argv):
                host = argv[index]
                index += 1
            break
        if word.startswith("-") and len(word) > 1:
            position = 1
            while position < len(word):
                letter = word[position]
                if letter in _WITH_ARGUMENT:
                    if position + 1 < len(word):  # -p22, -oBatchMode=yes
                        options.append(word)
                    elif index + 1 < len(argv):
                        options += [word, argv[index + 1]]
                        index += 1
                    else:
                        raise SshWrapperError(with_fix(f"ssh option -{letter} has no value in {list(argv)}",
                                                       "call the wrapper the way ssh is called"))
                    break
                if letter not in _FLAGS:
                    raise SshWrapperError(with_fix(f"unknown ssh option -{letter} in {list(argv)}",
                                                   "call the wrapper the way ssh is called"))
                position += 1
            else:
                options.append(word)
            index += 1
            continue
        if host is not None:
            break  # the command starts here
        host = word
        index += 1
    if host is None:
        raise SshWrapperError(with_fix(f"no host in the ssh arguments {list(argv)}",
                                       "call the wrapper as `ssh [options] HOST COMMAND`"))
    return options, host, list(argv[index:])


def rewrite(argv: Sequence[str], ssh: str = "ssh", python: str | None = None) -> list[str]:
    """The real ssh command for the wrapper's ``argv`` (without ``ssh``): ``WRAPPER_OPTIONS`` first,
    then the caller's options, the host, and the remote command run by the supervisor.

        rewrite(["-o", "StrictHostKeyChecking=no", "h1", "-p", "22", "true"], "/usr/bin/ssh")
        # ["/usr/bin/ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", ..., "-o",
        #  "StrictHostKeyChecking=no", "-p", "22", "h1", "<python> -m tfdist.launch.remote_task --shell true"]
    """
    options, host, command = split_ssh_argv(argv)
    if not command:
        raise SshWrapperError(with_fix(f"no remote command for {host} in {list(argv)}: the wrapper runs "
                                       "commands, not login shells", "use the real ssh for a login"))
    remote = shlex.join([python or sys.executable, "-m", SUPERVISOR, "--shell", " ".join(command)])
    return [ssh, *WRAPPER_OPTIONS, *options, host, remote]


def real_ssh(path: str | None = None) -> str:
    """The first ``ssh`` on ``path`` (default: PATH) that is not a copy of the wrapper script."""
    for directory in (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep):
        candidate = shutil.which("ssh", path=directory) if directory else None
        if candidate is None:
            continue
        try:
            with open(candidate, "rb") as head:
                if _MARKER in head.read(4096):
                    continue  # the wrapper's own script (install)
        except OSError:
            continue
        return candidate
    raise SshWrapperError(with_fix("no ssh client on PATH besides the tfdist wrapper",
                                   "install OpenSSH's client (ssh)"))


def run(argv: Sequence[str], ssh: str, heartbeat: float = HEARTBEAT_SECONDS,
        stop_seconds: float = STOP_SECONDS) -> int:
    """Run the rewritten ssh command, feed it heartbeats, pass stop signals on; ssh's exit code.

    A stop signal closes ssh's stdin (the supervisor on the host stops the command), then ssh gets
    ``stop_seconds`` to exit before its group is terminated."""
    with StopSignals() as guard:
        process = start_group(rewrite(argv, ssh), stdin=subprocess.PIPE)
        beat = Heartbeat([process.stdin], interval=heartbeat)
        while process.poll() is None and not guard.stopped.is_set():
            beat.tick()
            guard.stopped.wait(0.1)
        if process.poll() is None:
            close_stdins([process], stop_seconds)
            terminate([process], grace=2.0)
        process.wait()
    code = process.returncode
    return 128 - code if code < 0 else code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        ssh = real_ssh()
        rewrite(argv, ssh)  # refuse what cannot be rewritten before starting anything
    except SshWrapperError as exc:
        print(f"tfdist ssh wrapper: {exc}", file=sys.stderr, flush=True)
        return SSH_EXIT_FAILED if "no ssh client" in str(exc) else EXIT_USAGE
    return run(argv, ssh)


if __name__ == "__main__":
    sys.exit(main())
