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
* keeps reading stdin. EOF means the launcher stopped, died or lost the connection (sshd closes
  the channel when the client goes away or stops answering its keepalives): the supervisor sends
  SIGTERM to the task's process group, SIGKILL ``grace`` seconds later, and exits. SIGTERM,
  SIGHUP or SIGINT to the supervisor do the same;
* when the task exits by itself, exits with its code (128+N for a signal N), after killing
  whatever the task left in its group.

``--preflight N`` instead checks this host before anything starts and prints one JSON line:
``{"ports": [N free ports], "address": ..., "error": null}`` (see ``preflight``).

This module imports nothing heavy (no TensorFlow): it starts in a fraction of a second.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import IO, Any, Callable, Mapping

from tfdist.errors import TfdistError

SPEC_FIELDS = ("name", "argv", "cwd", "env", "bind", "grace")
EXIT_BAD_SPEC = 2  # the supervisor could not start the task (the message is on stderr)
_PR_SET_PDEATHSIG = 1


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


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _stop(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the task's group, SIGKILL to what is left after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # the group may hold grandchildren
    process.wait()


def _wait_for_eof(fd: int, stopped: threading.Event) -> None:
    """Read ``fd`` until EOF (or an error), then set ``stopped``. Raw reads: a daemon thread blocked
    here holds no lock of Python's buffered stdin, so the interpreter can exit under it."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
    stopped.set()


def supervise(stdin: IO[bytes], environ: Mapping[str, str], stderr: IO[str] = sys.stderr) -> int:
    """Read the spec, run the task until it exits or stdin ends; the exit code to leave with."""
    try:
        spec = decode_spec(stdin.readline())
        env = task_environment(spec, environ)
        os.chdir(spec["cwd"])
    except (RemoteTaskError, TfdistError, OSError) as exc:
        print(f"tfdist remote task on {socket.gethostname()}: {exc}", file=stderr, flush=True)
        return EXIT_BAD_SPEC
    stopped = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        stopped.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        process = subprocess.Popen(spec["argv"], env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=_die_with_parent)
    except OSError as exc:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print(f"tfdist remote task on {socket.gethostname()}: cannot start {spec['argv'][0]!r} ({exc}); fix: "
              "install it at the same path on every host", file=stderr, flush=True)
        return 127
    threading.Thread(target=_wait_for_eof, args=(stdin.fileno(), stopped), name="tfdist-stdin",
                     daemon=True).start()
    while process.poll() is None and not stopped.is_set():
        stopped.wait(0.2)
    _stop(process, float(spec["grace"]))
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    code = process.returncode
    return 128 - code if code < 0 else code


def preflight(count: int, host: str | None, shim: bool) -> dict[str, Any]:
    """Check this host for the launcher: ``count`` free ports (any interface), the address ``host``
    binds to, and the bind shim built here (when ``shim``). Errors come back in ``error``."""
    from tfdist.cluster.spec import free_ports

    result: dict[str, Any] = {"ports": [], "address": None, "error": None, "python": sys.executable}
    try:
        if host is not None:
            result["address"] = bind_address(host)
        if shim:
            from tfdist.launch.bind import shim_library

            shim_library()
        result["ports"] = free_ports(count, host="0.0.0.0")
    except (TfdistError, OSError) as exc:
        result["error"] = str(exc)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfdist.launch.remote_task",
                                     description="Run one task of `tfdist launch --hosts` (spec on stdin).")
    parser.add_argument("--preflight", type=int, metavar="N", help="print N free ports and checks as JSON")
    parser.add_argument("--host", help="with --preflight: the host name whose address the tasks bind")
    parser.add_argument("--shim", action="store_true", help="with --preflight: build the bind shim")
    args = parser.parse_args(argv)
    if args.preflight is not None:
        print(json.dumps(preflight(args.preflight, args.host, args.shim)), flush=True)
        return 0
    return supervise(sys.stdin.buffer, os.environ)


if __name__ == "__main__":
    sys.exit(main())
