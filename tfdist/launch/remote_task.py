"""The supervisor of one task on its host: ``python -m tfdist.launch.remote_task``, started over ssh.

The launcher (``tfdist launch --hosts``) starts one supervisor per task and writes the task's
specification to its stdin as one JSON line (``tfdist.launch.remote.TaskSpec``): argv, working
directory, environment, and the host name and port its server binds. Nothing of it is on the
command line, so TF_CONFIG stays out of ``ps`` and nothing needs shell quoting. The supervisor

* resolves the host name *on this host* and, unless the spec says ``bind: null``, builds or
  loads the bind shim here (its path is local to each host) so the server listens on that
  address only;
* starts the task in a new session (its own process group) with the parent-death signal, its
  output going straight to the supervisor's stdout and stderr (the ssh channel);
* keeps reading stdin, where the launcher writes a heartbeat every ``HEARTBEAT_SECONDS``
  (``tfdist.launch.processes``). EOF means the launcher stopped, died, or its ssh client went
  away; ``HEARTBEAT_TIMEOUT`` seconds without a byte mean the link or the launcher's host is gone
  (sshd itself may never notice: stock OpenSSH sends no ClientAlive keepalives). Either way the
  supervisor sends SIGTERM to the task's process group, SIGKILL ``grace`` seconds later, and
  exits. SIGTERM, SIGHUP or SIGINT to the supervisor do the same;
* when the task exits by itself, exits with its code (128+N for a signal N), after stopping
  whatever the task left in its group (TERM, the same grace, KILL). A task killed by a signal it
  did not get from the supervisor is also reported in one marker line on stderr
  (``tfdist.launch.oom.encode_exit``): the signal, and for SIGKILL whether this host's memory
  cgroup counted an OOM kill while the task ran, with the cgroup's limit; so is a task that exited
  with code 137, a wrapper shell (``bash run.sh``) whose command was SIGKILLed. The launcher reads it
  and names the cause (``ps:0 on h3 ran out of memory ...``).

``--shell COMMAND`` supervises ``sh -c COMMAND`` the same way (no spec; the ssh wrapper that
horovodrun uses, ``tfdist.launch.ssh_wrapper``, runs Horovod's remote commands so).
``--preflight N`` instead checks this host before anything starts and prints one JSON line:
``{"ports": [N free ports], "address": ..., "error": null}`` (see ``preflight``).

This module imports nothing heavy (no TensorFlow): it starts in a fraction of a second.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable, Mapping, Sequence

from tfdist.errors import TfdistError, with_fix
from tfdist.launch import oom
from tfdist.launch.processes import HEARTBEAT_SECONDS, MISSED_HEARTBEATS, StopSignals, start_group, stop_group

SPEC_FIELDS = ("name", "argv", "cwd", "env", "bind", "grace")
EXIT_BAD_SPEC = 2  # the supervisor could not start the task (the message is on stderr)
HEARTBEAT_TIMEOUT = HEARTBEAT_SECONDS * MISSED_HEARTBEATS  # s without a byte on stdin: the launcher is gone


class RemoteTaskError(TfdistError, RuntimeError):
    """A task specification or a host that the supervisor cannot use; the message names the fix."""


def decode_spec(line: bytes | str) -> dict[str, Any]:
    """The specification sent on the first stdin line, checked field by field."""
    if not line:
        raise RemoteTaskError("no task specification on stdin (the launcher went away before sending it); "
                              "fix: start remote tasks with `tfdist launch --hosts`")
    try:
        spec = json.loads(line)
    except ValueError as exc:
        raise RemoteTaskError(f"the task specification is not JSON ({exc}); fix: start remote tasks with "
                              "`tfdist launch --hosts` of the same tfdist version on every host") from None
    if not isinstance(spec, dict) or sorted(spec) != sorted(SPEC_FIELDS):
        got = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
        raise RemoteTaskError(f"the task specification has fields {got}, expected {sorted(SPEC_FIELDS)}; "
                              "fix: use the same tfdist version on every host")
    argv, env, bind = spec["argv"], spec["env"], spec["bind"]
    problems = []
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        problems.append("argv must be a non-empty list of strings")
    if not isinstance(spec["cwd"], str) or not spec["cwd"]:
        problems.append("cwd must be a path")
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        problems.append("env must map strings to strings")
    if bind is not None and not (isinstance(bind, dict) and isinstance(bind.get("host"), str)
                                 and isinstance(bind.get("port"), int) and 1 <= bind["port"] <= 65535):
        problems.append("bind must be null or {host, port}")
    if not isinstance(spec["grace"], (int, float)) or spec["grace"] < 0:
        problems.append("grace must be 0 or more seconds")
    if problems:
        raise RemoteTaskError(f"the task specification is malformed: {'; '.join(problems)}; fix: use the "
                              "same tfdist version on every host")
    return spec


def bind_address(host: str, resolve: Callable[[str], str] = socket.gethostbyname) -> str:
    """The IPv4 address ``host`` resolves to here, checked to be one of this host's own addresses
    and not loopback (other hosts must reach the server there)."""
    try:
        address = resolve(host)
    except OSError as exc:
        raise RemoteTaskError(f"host {host!r} does not resolve on {socket.gethostname()} ({exc}); fix: make "
                              "every host name in --hosts resolve on every host (DNS or /etc/hosts), or "
                              "list IP addresses in --hosts") from None
    if address.startswith("127.") and host not in ("localhost", "127.0.0.1"):
        raise RemoteTaskError(f"host {host!r} resolves to the loopback address {address} on itself, so other "
                              "hosts could not reach its server; fix: map the name to the host's network "
                              "address in /etc/hosts, or list IP addresses in --hosts")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            raise RemoteTaskError(f"host {host!r} resolves to {address}, which is not an address of the host "
                                  f"the task runs on ({socket.gethostname()}); fix: check that the name in "
                                  "--hosts reaches that very host over ssh") from None
    return address


def task_environment(spec: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """This host's environment (what sshd gives), overlaid with the spec's, plus the bind shim's
    variables when the spec asks for an exact bind."""
    env = {**environ, **spec["env"]}
    if spec["bind"] is not None:
        from tfdist.launch.bind import exact_bind_env, shim_library

        address = bind_address(spec["bind"]["host"])
        env.update(exact_bind_env(address, [spec["bind"]["port"]], shim_library(), env))
    return env


class _StdinWatch:
    """Reads the supervisor's stdin in a daemon thread: the time of the last byte (a heartbeat or
    anything else) and whether EOF came. Raw reads: a daemon thread blocked here holds no lock of
    Python's buffered stdin, so the interpreter can exit under it."""

    def __init__(self, fd: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._fd, self._clock = fd, clock
        self.last = clock()
        self.eof = threading.Event()
        threading.Thread(target=self._read, name="tfdist-stdin", daemon=True).start()

    def _read(self) -> None:
        try:
            while os.read(self._fd, 65536):
                self.last = self._clock()
        except OSError:
            pass
        self.eof.set()

    def silent_for(self) -> float:
        return self._clock() - self.last


def run_supervised(argv: Sequence[str], env: Mapping[str, str] | None, grace: float, stdin_fd: int,
                   silence: float = HEARTBEAT_TIMEOUT, stderr: IO[str] = sys.stderr) -> int:
    """Run ``argv`` in its own process group until it exits, ``stdin_fd`` ends, ``silence`` seconds
    pass without a byte on it (missed heartbeats), or SIGTERM/SIGHUP/SIGINT arrives; then TERM,
    ``grace``, KILL of its group. The exit code to leave with (128+N for a signal N, 127 when it
    cannot start)."""
    code, _ = _run_supervised(argv, env, grace, stdin_fd, silence, stderr)
    return 128 - code if code < 0 else code


def _run_supervised(argv: Sequence[str], env: Mapping[str, str] | None, grace: float, stdin_fd: int,
                    silence: float, stderr: IO[str]) -> tuple[int, bool]:
    """``run_supervised``'s work: the task's ``Popen.returncode`` (127: it did not start) and whether
    the supervisor stopped it (then a signal it died of is the supervisor's own)."""
    with StopSignals() as guard:
        try:
            process = start_group(argv, env=None if env is None else dict(env), stdin=subprocess.DEVNULL)
        except OSError as exc:
            _say(stderr, with_fix(f"cannot start {argv[0]!r} ({exc})", "install it at the same path on "
                                  "every host, or check the command and the working directory"))
            return 127, False
        watch = _StdinWatch(stdin_fd)
        while process.poll() is None and not guard.stopped.is_set():
            if watch.eof.is_set():
                break
            if watch.silent_for() > silence:
                _say(stderr, f"no heartbeat from the launcher for {watch.silent_for():.0f} s (the link or "
                     "the launcher is gone); stopping the task")
                break
            guard.stopped.wait(0.2)
        stopped = process.poll() is None
        stop_group(process, grace)
    return process.returncode, stopped


def report_exit(returncode: int, stopped: bool, before: oom.MemoryRecord | None,
                after: oom.MemoryRecord | None, stderr: IO[str]) -> None:
    """Write the marker line for a task that died by a signal it did not get from the supervisor,
    or exited with code 137 as a shell does whose command was SIGKILLed (``bash run.sh``); for
    those two, with what the memory cgroup says ``before`` and ``after`` the task."""
    if stopped or 0 <= returncode != oom.SHELL_KILLED:
        return
    if returncode == oom.SHELL_KILLED:
        signal_number, cause = int(signal.SIGKILL), oom.kill_cause(before, after, exited=True)
    else:
        signal_number = -returncode
        cause = oom.kill_cause(before, after) if signal_number == signal.SIGKILL else oom.KillCause(False)
    print(oom.encode_exit(signal_number, cause), file=stderr, flush=True)


def _say(stderr: IO[str], message: str) -> None:
    print(f"tfdist remote task on {socket.gethostname()}: {message}", file=stderr, flush=True)


def supervise(stdin: IO[bytes], environ: Mapping[str, str], stderr: IO[str] = sys.stderr,
              silence: float = HEARTBEAT_TIMEOUT) -> int:
    """Read the spec, run the task until it exits, stdin ends or heartbeats stop; the exit code."""
    try:
        spec = decode_spec(stdin.readline())
        env = task_environment(spec, environ)
    except TfdistError as exc:
        _say(stderr, str(exc))
        return EXIT_BAD_SPEC
    except OSError as exc:
        _say(stderr, with_fix(f"cannot prepare the task ({exc})", "run `python -m tfdist.launch.remote_task "
                              "--preflight 1 --shim` on this host to see why"))
        return EXIT_BAD_SPEC
    try:
        os.chdir(spec["cwd"])
    except OSError as exc:
        _say(stderr, with_fix(f"cannot enter the working directory ({exc})", "create it on this host, or "
                              "start the launcher from a directory that exists on every host"))
        return EXIT_BAD_SPEC
    before = oom.snapshot()  # the task runs in this process's memory cgroup
    code, stopped = _run_supervised(spec["argv"], env, float(spec["grace"]), stdin.fileno(), silence, stderr)
    candidate = code in (-signal.SIGKILL, oom.SHELL_KILLED) and not stopped
    report_exit(code, stopped, before, oom.snapshot() if candidate else None, stderr)
    return 128 - code if code < 0 else code


def supervise_shell(command: str, stdin: IO[bytes], grace: float, silence: float = HEARTBEAT_TIMEOUT,
                    stderr: IO[str] = sys.stderr) -> int:
    """``sh -c COMMAND`` under the same supervision as a spec'd task (``--shell``, used by the ssh
    wrapper of horovodrun): this host's environment, the current directory."""
    return run_supervised(["sh", "-c", command], None, grace, stdin.fileno(), silence, stderr)


def command_problem(command: str, cwd: str, path: str | None) -> str | None:
    """Why ``command`` (a task's argv[0]) would not start from ``cwd`` with ``PATH=path``, or None."""
    if os.sep in command:
        target = os.path.normpath(os.path.join(cwd, command))
        if not os.path.isfile(target):
            return with_fix(f"the command {command!r} does not exist in {cwd}", "install it at the same path "
                            "on every host (or give the command as a name found on PATH)")
        if not os.access(target, os.X_OK):
            return with_fix(f"the command {command!r} is not executable", f"chmod +x {target}")
        return None
    if shutil.which(command, path=path) is None:
        return with_fix(f"the command {command!r} is not found on PATH ({path})", "install it on every host "
                        "in a directory on the launcher's PATH (tasks get the launcher's PATH), or give its "
                        "full path")
    return None


def preflight(count: int, host: str | None, shim: bool, cwd: str | None = None, command: str | None = None,
              path: str | None = None) -> dict[str, Any]:
    """Check this host for the launcher: ``count`` free ports (any interface), the address ``host``
    binds to, the bind shim built here (when ``shim``), the working directory ``cwd`` and the task's
    ``command`` (found on ``path``, the PATH tasks get). Errors come back in ``error``, each ending
    with its fix."""
    from tfdist.cluster.spec import free_ports

    result: dict[str, Any] = {"ports": [], "address": None, "error": None, "python": sys.executable}
    try:
        if cwd is not None and not os.path.isdir(cwd):
            result["error"] = with_fix(f"the working directory {cwd} does not exist",
                                       "create it on every host, or start the launcher from a directory "
                                       "that exists on every host (tasks start in the launcher's)")
            return result
        if command is not None:
            problem = command_problem(command, cwd or os.getcwd(), path)
            if problem:
                result["error"] = problem
                return result
        if host is not None:
            result["address"] = bind_address(host)
        if shim:
            from tfdist.launch.bind import shim_library

            shim_library()
        result["ports"] = free_ports(count, host="0.0.0.0")
    except TfdistError as exc:
        result["error"] = str(exc)
    except OSError as exc:
        result["error"] = with_fix(f"checking this host failed ({exc})", "run `python -m "
                                   "tfdist.launch.remote_task --preflight 1` on it to see why")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfdist.launch.remote_task",
                                     description="Run one task of `tfdist launch --hosts` (spec on stdin).")
    parser.add_argument("--preflight", type=int, metavar="N", help="print N free ports and checks as JSON")
    parser.add_argument("--host", help="with --preflight: the host name whose address the tasks bind")
    parser.add_argument("--shim", action="store_true", help="with --preflight: build the bind shim")
    parser.add_argument("--cwd", help="with --preflight: the working directory the tasks need")
    parser.add_argument("--command", help="with --preflight: the task's command (argv[0])")
    parser.add_argument("--path", help="with --preflight: the PATH the tasks get")
    parser.add_argument("--shell", metavar="COMMAND",
                        help="run `sh -c COMMAND` under supervision (heartbeats on stdin; for horovodrun)")
    parser.add_argument("--grace", type=float, default=5.0,
                        help="with --shell: seconds between TERM and KILL")
    parser.add_argument("--heartbeat-timeout", type=float, default=HEARTBEAT_TIMEOUT,
                        help="seconds without a byte on stdin after which the task is stopped")
    args = parser.parse_args(argv)
    if args.preflight is not None:
        print(json.dumps(preflight(args.preflight, args.host, args.shim, args.cwd, args.command, args.path)),
              flush=True)
        return 0
    if args.shell is not None:
        return supervise_shell(args.shell, sys.stdin.buffer, args.grace, args.heartbeat_timeout)
    return supervise(sys.stdin.buffer, os.environ, silence=args.heartbeat_timeout)


if __name__ == "__main__":
    # The task (or --shell command) gets this host's environment as sshd gave it: take back the
    # TF_USE_LEGACY_KERAS that importing tfdist set in this supervisor.
    from tfdist.keras_compat import restore_user_keras_choice

    restore_user_keras_choice()
    sys.exit(main())
