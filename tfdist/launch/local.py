"""Run a planned local cluster: prefixed output, every exit reported, the job's exit code, no orphans.

Each task runs in its own process group; when the job ends (``tfdist.launch.policy`` decides
which exits end it, and with which code), or on Ctrl-C, SIGTERM or SIGHUP, every other group is
sent SIGTERM, then SIGKILL after a grace period. A stop signal only sets a flag that the launcher
polls, and teardown ignores further signals, so a second Ctrl-C cannot interrupt it half-way; the
tasks themselves start with default signal handling.

Tasks die with the launcher even when it is SIGKILLed: on Linux each is started with the
parent-death signal SIGTERM (``prctl(PR_SET_PDEATHSIG)``). The kernel sends it when the *thread*
that forked the task exits, so tasks are started from the main thread only (the signal handlers
installed here already require it), before any output thread exists. It reaches the task itself,
not processes the task starts (horovodrun passes it on to its ranks by itself).

Tasks on ``--hosts`` (``tfdist.launch.commands.plan_host_cluster``) run the same way: the local
process is the ``ssh`` client (or, for this machine, the supervisor itself), whose stdin gets the
task's specification, then a heartbeat every ``HEARTBEAT_SECONDS`` (``tfdist.launch.processes``;
non-blocking writes, so a cut link never blocks the launcher). Teardown first closes those stdins,
which makes each host's supervisor (``tfdist.launch.remote_task``) stop its task (TERM, grace,
KILL), waits the grace period plus ``SUPERVISOR_MARGIN``, then signals the local process groups
as above. A launcher killed with SIGKILL takes its ssh clients along (the parent-death signal),
and the supervisor sees EOF; when the launcher's host vanishes or its link is cut, nothing
reaches the supervisor any more, and it stops its task after ``MISSED_HEARTBEATS`` silent
intervals (stock sshd would keep such a session for hours). Output lines are prefixed
``[worker:1@h2]``; an ssh client's exit code 255 is reported as a failed or dropped connection.

A task that dies by SIGKILL may have run out of memory (``tfdist.launch.oom``): for a task on a host
the supervisor's marker line (read from the task's output, not shown) says whether that host's
memory cgroup counted an OOM kill; for a task on this machine the launcher reads its own memory
cgroup before the job and at each exit, and compares the kill with the reading before it. A task
that exits with code 137 (a wrapper shell whose command was SIGKILLed) is checked the same way.
The policy gets the cause with the exit.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import IO, Callable, Mapping, Sequence

from tfdist.launch import oom
from tfdist.launch.commands import LaunchError, TaskProcess
from tfdist.launch.policy import Policy, describe_exit, exit_code
from tfdist.launch.processes import SSH_EXIT_FAILED, Heartbeat, StopSignals, close_stdins, start_group, terminate
from tfdist.lifecycle import reachable

GRACE_SECONDS = 5.0
TAIL_LINES = 200  # last stderr lines of run_command's command kept for ``explain``
TAIL_LINE_BYTES = 2000
PUMP_JOIN_SECONDS = 5.0  # a grandchild may hold the pipe open after the command exits
PROBE_SECONDS = 0.5  # how often the launcher looks whether a task's server listens
SUPERVISOR_MARGIN = 5.0  # s beyond the grace for a remote supervisor to stop its task and exit
MARKER_WAIT_SECONDS = 3.0  # after a supervised task exits: how long its output may take to arrive
#: After a verdict that fails the job: how long the launcher still reports exits, so a chief that
#: exits first (it saw a ps vanish) does not hide the ps's own exit line (its OOM kill, say).
LATE_EXIT_SECONDS = 1.0

__all__ = ["GRACE_SECONDS", "exit_code", "report_to_stderr", "run_command", "run_local_cluster"]


def _start(command: Sequence[str], env: dict[str, str] | None, capture: bool,
           stdin: bytes | None = None, pipe_stderr: bool = False) -> subprocess.Popen:
    """Start one task; with ``stdin``, write it to the task's stdin and keep that pipe open (a
    supervisor of ``tfdist.launch.remote_task`` stops its task when the pipe closes).
    ``capture``: stdout and stderr on one pipe; ``pipe_stderr``: stderr alone on a pipe."""
    if threading.current_thread() is not threading.main_thread():
        raise LaunchError("tasks must be started from the main thread, since their parent-death signal "
                          "fires when the thread that started them exits; fix: call run_local_cluster "
                          "or run_command from the main thread")
    stderr = subprocess.STDOUT if capture else subprocess.PIPE if pipe_stderr else None
    process = start_group(command, env=env, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                          stdout=subprocess.PIPE if capture else None, stderr=stderr)
    if stdin is not None:
        try:
            process.stdin.write(stdin)  # one short line: fits the pipe's buffer, never blocks
            process.stdin.flush()
        except BrokenPipeError:
            pass  # it exited at once; the watch reports its exit
    return process


def _pump(stream: IO[bytes], prefix: bytes, sink: IO[bytes], lock: threading.Lock,
          marker: Callable[[str], None] | None = None) -> None:
    """Copy ``stream`` to ``sink`` with ``prefix``; a supervisor's exit marker goes to ``marker``.

    The marker (on the supervisor's stderr) shares the pipe with the task's stdout, so it may follow
    output that has no newline yet (a Keras progress bar): it is looked for anywhere in a line, and
    what comes before it is shown as a line of its own."""
    token = oom.EXIT_MARKER.encode()
    for line in iter(stream.readline, b""):
        at = line.find(token) if marker is not None else -1
        if at >= 0:
            found = line[at:].decode(errors="replace").rstrip("\r\n")
            if oom.decode_exit(found, None) is not None:  # else output that only looks like one: shown
                marker(found)
                if at == 0:
                    continue
                line = line[:at]
        with lock:
            sink.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            sink.flush()
    stream.close()


def _tee(stream: IO[bytes], sink: IO[bytes] | None, tail: deque[str]) -> None:
    """Copy ``stream`` to ``sink`` (this process's stderr) line by line, unchanged, keeping its last
    lines (decoded, shortened) in ``tail``."""
    for line in iter(stream.readline, b""):
        if sink is not None:
            sink.write(line)
            sink.flush()
        else:
            sys.stderr.write(line.decode(errors="replace"))
            sys.stderr.flush()
        tail.append(line[:TAIL_LINE_BYTES].decode(errors="replace").rstrip("\r\n"))
    stream.close()


def report_to_stderr(line: str) -> None:
    """The launcher's own lines (exits, teardown, the banner): ``tfdist launch: ...`` on stderr."""
    print(f"tfdist launch: {line}", file=sys.stderr, flush=True)


def _listening(address: str) -> bool:
    """Whether the task's server is up (a short probe: the launcher polls every task)."""
    return reachable(address, timeout=0.2)


class _Exits:
    """What is known of how tasks died: the supervisors' marker lines (``tfdist.launch.oom``), and the
    launcher's own memory cgroup (for the tasks it runs on this machine), read before the job and
    again at each exit: a SIGKILL is compared with the reading of the exit before it, so one OOM
    kill is not the cause of every later SIGKILL of the job."""

    def __init__(self, before: oom.MemoryRecord | None = None) -> None:
        self.before = before
        self.markers: dict[str, str] = {}
        self.pumps: dict[str, threading.Thread] = {}

    def marker(self, name: str) -> Callable[[str], None]:
        return lambda line: self.markers.__setitem__(name, line)

    def cause(self, task: TaskProcess, returncode: int) -> tuple[int, oom.KillCause | None]:
        """The return code to report (a supervised task's signal as a negative code) and the cause of
        a SIGKILL or of an exit with code 137 (``oom.SHELL_KILLED``, a wrapper shell whose command was
        killed); None: neither, or the memory cgroup counted no OOM kill."""
        before, self.before = self.before, oom.snapshot()  # the baseline of the next exit
        if task.stdin is not None:  # a supervisor: its marker line, once its output has arrived
            pump = self.pumps.get(task.name)
            if pump is not None:
                pump.join(timeout=MARKER_WAIT_SECONDS)
            decoded = oom.decode_exit(self.markers.get(task.name, ""), task.host)
            if decoded is None:
                return returncode, None
            signal_number, cause = decoded
            code = 128 + signal_number if cause.exited else -signal_number
            return code, cause if signal_number == signal.SIGKILL and cause.oom is not False else None
        if returncode not in (-signal.SIGKILL, oom.SHELL_KILLED):
            return returncode, None
        cause = oom.kill_cause(before, self.before, exited=returncode == oom.SHELL_KILLED)
        return returncode, cause if cause.oom is not False else None


def _watch(started: Sequence[tuple[TaskProcess, subprocess.Popen]], policy: Policy, guard: StopSignals,
           report: Callable[[str], None], poll: float = 0.1,
           probe: Callable[[str], bool] = _listening, exits: _Exits | None = None,
           finished: Callable[[], bool] | None = None) -> int | None:
    """Report every exit to ``policy`` (and print its lines) until it ends the job: its exit code;
    0 as soon as ``finished()`` says the job's work is done; ``None`` when a stop signal arrives first."""
    exits = exits or _Exits()
    running = {task.name: process for task, process in started}
    tasks = {task.name: task for task, _ in started}
    unserved = {task.name: task.address for task, _ in started if task.name in policy.probe and task.address}
    next_probe = 0.0
    beat = Heartbeat(process.stdin for _, process in started)  # the supervisors' stdins (see the docstring)

    def collect() -> None:
        """Report the exits of tasks that have ended since the last look."""
        for name, process in list(running.items()):
            if process.poll() is not None:
                del running[name]
                unserved.pop(name, None)
                task = tasks[name]
                if task.ssh and process.returncode == SSH_EXIT_FAILED:
                    report(f"{name}: ssh to {task.host} failed or the connection dropped (exit code "
                           f"{SSH_EXIT_FAILED})")
                returncode, kill = exits.cause(task, process.returncode)
                for line in policy.exited(name, returncode, time.monotonic(), kill):
                    report(line)

    while not guard.stopped.is_set():
        beat.tick()
        now = time.monotonic()
        if unserved and now >= next_probe:
            for name, address in list(unserved.items()):
                if probe(address):
                    policy.served(name)
                    del unserved[name]
            next_probe = now + PROBE_SECONDS
        collect()
        if finished is not None and finished():
            return 0
        verdict = policy.verdict(time.monotonic())
        if verdict is not None:
            if verdict.code != 0:  # a failed job: exits of the same moment may say why (a ps out of memory)
                deadline = time.monotonic() + LATE_EXIT_SECONDS
                while running and time.monotonic() < deadline:
                    time.sleep(poll)
                    collect()
            if verdict.message:
                report(verdict.message)
            return verdict.code
        time.sleep(poll)
    return None


def run_local_cluster(tasks: Sequence[TaskProcess], policy: Policy, grace: float = GRACE_SECONDS,
                      sink: IO[bytes] | None = None, report: Callable[[str], None] | None = None,
                      finished: Callable[[], bool] | None = None) -> int:
    """Start every task, stream its output as ``[type:index] line``, report every exit; the job's
    exit code as ``policy`` decides it (130 on a stop signal). ``finished`` (polled): whether the
    job's work is done though tasks still run (an adaptive run's chief left for the next plan); the
    rest are then stopped and the code is 0.

        tasks = plan_local_cluster(["python", "train.py"], 2, 1, free_ports(4), os.environ)[1]
        code = run_local_cluster(tasks, ParameterServerPolicy([t.name for t in tasks], timeout=60))

    ``report`` gets the launcher's own lines (default: ``tfdist launch: ...`` on stderr). Raises
    ``OSError`` when the command cannot be started.
    """
    sink = sink or sys.stdout.buffer
    report = report or report_to_stderr
    lock = threading.Lock()
    started: list[tuple[TaskProcess, subprocess.Popen]] = []
    pumps: list[threading.Thread] = []
    width = max(len(t.label) for t in tasks)
    code: int | None = None
    exits = _Exits(oom.snapshot())  # local tasks run in this process's memory cgroup
    with StopSignals() as guard:
        try:
            for task in tasks:  # every fork before the first thread (see the module docstring)
                if guard.stopped.is_set():
                    break
                started.append((task, _start(task.command, dict(task.env), capture=True, stdin=task.stdin)))
            for task, process in started:
                prefix = f"[{task.label}]".ljust(width + 2).encode() + b" "
                marker = exits.marker(task.name) if task.stdin is not None else None
                pump = threading.Thread(target=_pump, args=(process.stdout, prefix, sink, lock, marker),
                                        daemon=True)
                pump.start()
                pumps.append(pump)
                exits.pumps[task.name] = pump
            if not guard.stopped.is_set():
                code = _watch(started, policy, guard, report, exits=exits, finished=finished)
        finally:
            guard.quiet()
            live = [task.name for task, process in started if process.poll() is None]
            close_stdins([process for _, process in started], grace + SUPERVISOR_MARGIN)
            stubborn = terminate([process for _, process in started], grace)
            if live:
                report(f"stopped {', '.join(live)}")
            for task, process in started:
                if process in stubborn:
                    report(f"{task.name} ignored SIGTERM for {grace:g} s; killed it with SIGKILL")
            for pump in pumps:
                pump.join(timeout=5)
    return 130 if code is None else code


def run_command(command: Sequence[str], grace: float = GRACE_SECONDS,
                report: Callable[[str], None] | None = None, name: str | None = None,
                explain: Callable[[Sequence[str]], str | None] | None = None,
                env: Mapping[str, str] | None = None, finished: Callable[[], bool] | None = None) -> int:
    """Run one launcher command (horovodrun) and return its exit code; ``name`` (default: the
    command's file name) is what the exit report calls it; ``env``: its environment (default this
    process's). ``finished`` (polled): whether the job's work is done though the command still runs
    (an adaptive run's chief left for the next plan); the command is then stopped as on a stop signal
    and the code is 0.

    With ``explain``, the command's stderr passes through a pipe (unchanged, line by line, to this
    process's stderr) and, when it fails, ``explain(last lines)`` may say why in a few words: the
    report, the last line, is then ``horovodrun exited with code 1: <why>; its output is above``
    (``tfdist.launch.horovod_output.explain_failure`` reads horovodrun's tracebacks).

    A stop signal is passed on as SIGINT, which horovodrun handles like Ctrl-C by stopping its
    ranks; SIGKILL follows after ``grace`` seconds. If this process dies, horovodrun gets SIGTERM.
    """
    report = report or report_to_stderr
    name = name or os.path.basename(command[0])
    code: int | None = None
    done_early = False
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    pump: threading.Thread | None = None
    with StopSignals() as guard:
        process = _start(command, None if env is None else dict(env), capture=False,
                         pipe_stderr=explain is not None)
        try:
            if explain is not None:  # the thread starts after the fork (see the module docstring)
                sink = getattr(sys.stderr, "buffer", None)
                pump = threading.Thread(target=_tee, args=(process.stderr, sink, tail), daemon=True)
                pump.start()
            while not guard.stopped.is_set():
                if process.poll() is not None:
                    code = exit_code(process.returncode)
                    break
                if finished is not None and finished():
                    done_early = True
                    break
                time.sleep(0.1)
        finally:
            guard.quiet()
            terminate([process], grace, first=signal.SIGINT)
            if pump is not None:
                pump.join(timeout=PUMP_JOIN_SECONDS)  # its output first: the summary is the last line
    if done_early:
        report(f"{name} stopped: the job's work was done")
        return 0
    if code is not None:
        line = describe_exit(name, process.returncode)
        why = explain(list(tail)) if explain is not None and process.returncode != 0 else None
        report(f"{line}: {why}; its output is above" if why else line)
    return 130 if code is None else code
