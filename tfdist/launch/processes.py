"""Starting and stopping process groups: the one place that sets the parent-death signal and runs
TERM, grace, KILL. Used by the launcher (``tfdist.launch.local``), the supervisor of a task on its
host (``tfdist.launch.remote_task``), the ssh wrapper for horovodrun (``tfdist.launch.ssh_wrapper``)
and the benchmarks (``benchmarks/procs.py``, ``benchmarks/network.py``).

Each process starts in a new session (its own process group, so signals reach what it starts as
well) with the parent-death signal SIGTERM on Linux (``prctl(PR_SET_PDEATHSIG)``). The kernel
sends that signal when the *thread* that forked the child exits, so callers fork from a thread
that lives as long as the child (the main thread). It reaches the child itself, not processes the
child starts, and it can reach it more than once: the kernel sends it at each reparenting, and the
children of a SIGKILLed multi-threaded launcher may pass through its other, still dying, threads before
init. A Python child must survive a signal inside its own handler: ``StopSignals`` takes no lock, and
Horovod's own launcher, whose handler does, gets ``handler_once``
(``tfdist.upstream.guard_horovod_shutdown_signals``).

Heartbeats: a launcher that holds a supervisor's stdin writes ``HEARTBEAT`` to it every
``HEARTBEAT_SECONDS`` (``Heartbeat``), with non-blocking writes: a full pipe (a cut link) or a
closed one never blocks the launcher. The supervisor stops its task after
``MISSED_HEARTBEATS`` silent intervals, so a task never outlives a launcher that vanished, even
on a host whose sshd sends no keepalives (the OpenSSH default).

Marked processes: a group kill misses what started a session of its own (horovodrun's ranks). A
caller that puts ``NAME=token`` in the environment of what it starts finds them all again with
``marked_pids`` and ends them with ``kill_marked`` (Linux ``/proc``; elsewhere nothing is found).

No TensorFlow here, nothing heavy: the supervisor imports this on every task start.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import IO, Any, Callable, Iterable, Sequence

HEARTBEAT = b"\n"
HEARTBEAT_SECONDS = 2.0  # how often a launcher writes a heartbeat to each supervisor's stdin
MISSED_HEARTBEATS = 4  # silent intervals after which a supervisor stops its task
SSH_EXIT_FAILED = 255  # what ssh exits with when it cannot connect or the connection drops
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

__all__ = ["HEARTBEAT", "HEARTBEAT_SECONDS", "MISSED_HEARTBEATS", "SSH_EXIT_FAILED", "STOP_SIGNALS", "Heartbeat",
           "StopFlag", "StopSignals", "close_stdins", "die_with_parent", "group_alive", "handler_once",
           "kill_marked", "marked_pids", "start_group", "stop_group", "stop_process", "terminate"]


def handler_once(body: Callable[[int, Any], None]) -> Callable[[int, Any], None]:
    """A signal handler that runs ``body`` for the first signal only; later ones return at once.

    Python runs a handler between two bytecodes of the main thread, also inside a handler that is still
    running. A body that sets a ``threading.Event`` holds the Event's lock while it notifies, so a second
    signal arriving there ran a second body that waited for that lock forever: the main thread deadlocked
    on itself. Signals come close together whenever a child's parent-death signal fires more than once
    (the kernel sends it at each reparenting: a SIGKILLed multi-threaded launcher hands its children to
    its other, still dying, threads, then to init or a subreaper). A nested call that starts before the
    first has marked itself runs whole before the first goes on, so the lock is free again either way.
    (The main thread must not wait on that Event itself: a first signal landing inside ``Event.wait``'s
    locked moments deadlocks the same way; ``StopFlag`` is for a stop the main thread waits on.)"""
    fired = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        body(signum, frame)

    return handler


class StopFlag:
    """A stop that a signal handler sets and the main thread polls or waits on, without a lock: a
    ``threading.Event`` set from a handler deadlocked when the signal landed while the main thread held
    the Event's lock (inside ``Event.wait`` or ``Event.set``). ``wait`` sleeps in slices of at most
    ``POLL_SECONDS``, so a stop is seen within one slice."""

    POLL_SECONDS = 0.05

    def __init__(self) -> None:
        self._stopped = False

    def set(self) -> None:
        self._stopped = True

    def is_set(self) -> bool:
        return self._stopped

    def wait(self, timeout: float) -> bool:
        """Sleep until the flag is set or ``timeout`` seconds passed; whether it is set."""
        deadline = time.monotonic() + timeout
        while not self._stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, self.POLL_SECONDS))
        return self._stopped


class StopSignals:
    """Inside ``with``: SIGINT, SIGTERM or SIGHUP only sets ``stopped`` (a ``StopFlag``: a loop polls or
    waits on it), so a stop is handled where the caller chooses; ``quiet()`` ignores them (for a teardown
    that must finish); leaving the block restores the previous handlers. Main thread only (Python's rule
    for signal handlers). The handler takes no lock, so a signal can land anywhere, also inside itself."""

    def __enter__(self) -> StopSignals:
        self.stopped = StopFlag()
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        return self

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopped.set()

    def quiet(self) -> None:
        """Ignore further stop signals until the block ends."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when the forking thread exits (Linux only);
    the child exits at once if its parent already died between the fork and ``prctl``.

    Everything it needs is looked up here, before the fork: the child only calls ``prctl``.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent, signum = os.getpid(), int(sig)

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(128 + signum)

    return set_pdeathsig


def start_group(argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, ...)`` in a new session with the parent-death signal."""
    return subprocess.Popen(list(argv), start_new_session=True, preexec_fn=die_with_parent(), **popen_kwargs)


def group_alive(pgid: int) -> bool:
    """Whether any process is left in the process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def terminate(processes: Sequence[subprocess.Popen], grace: float,
              first: signal.Signals = signal.SIGTERM) -> list[subprocess.Popen]:
    """Send ``first`` to the group of every live process, SIGKILL every group after ``grace`` seconds
    (the groups may hold grandchildren); the processes that needed the SIGKILL."""
    for process in processes:
        if process.poll() is None:
            _signal_group(process.pid, first)
    deadline = time.monotonic() + grace
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    stubborn = [process for process in processes if process.poll() is None]
    for process in processes:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
    return stubborn


def close_stdins(processes: Sequence[subprocess.Popen], wait: float) -> None:
    """Close every open stdin (a supervisor stops its task when its stdin ends: TERM, grace, KILL) and
    give the processes ``wait`` seconds to exit by themselves."""
    piped = [process for process in processes if process.stdin is not None and not process.stdin.closed]
    for process in piped:
        with contextlib.suppress(OSError):
            process.stdin.close()
    deadline = time.monotonic() + wait
    for process in piped:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))


def stop_group(process: subprocess.Popen, grace: float, poll: float = 0.05) -> bool:
    """Stop ``process`` and everything in its group: SIGTERM to the group, SIGKILL to what is left
    after ``grace`` seconds. Also when the leader already exited: what it left in its group gets the
    same grace. Whether anything needed the SIGKILL."""
    _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(poll)
    stubborn = process.poll() is None or group_alive(process.pid)
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()
    return stubborn


def marked_pids(name: str, token: str, proc: str = "/proc") -> list[int]:
    """The processes, other than this one, whose environment holds ``name=token`` (those of other
    users are unreadable and skipped)."""
    needle = f"{name}={token}".encode()
    found = []
    try:
        entries = os.listdir(proc)
    except OSError:  # no /proc: not Linux
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        if needle in _environ(f"{proc}/{entry}").split(b"\0"):
            found.append(int(entry))
    return found


def _environ(process: str, retries: int = 20, pause: float = 0.005) -> bytes:
    """The environment block of ``process`` (a ``/proc/PID`` folder); b"" for a process gone or
    unreadable, a kernel thread or a zombie (no executable: nothing to read, nothing to kill).

    A process in the middle of ``execve`` reads as empty for an instant (its new memory has no
    environment yet): read again, up to ``retries`` times ``pause`` seconds apart, so that a marked
    process exec-ing at the time of a sweep is not missed.
    """
    for _ in range(retries + 1):
        try:
            with open(f"{process}/environ", "rb") as f:
                data = f.read()
            if data:
                return data
            os.readlink(f"{process}/exe")
        except OSError:
            return b""
        time.sleep(pause)
    return b""


def kill_marked(name: str, token: str, rounds: int = 3, pause: float = 0.5) -> list[int]:
    """SIGKILL every process whose environment holds ``name=token``, up to ``rounds`` sweeps
    ``pause`` seconds apart (one dying may have started another); the pids it killed."""
    killed: list[int] = []
    for _ in range(rounds):
        pids = marked_pids(name, token)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(pause)
    return killed


def stop_process(process: subprocess.Popen, grace: float) -> bool:
    """Stop ``process`` alone (not its group: one that shares its caller's group, or a launcher that
    stops its own tasks on SIGTERM): SIGTERM, SIGKILL after ``grace`` seconds. Whether it needed the
    SIGKILL; a process that already exited is only reaped."""
    if process.poll() is not None:
        return False
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
        return False
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return True


class Heartbeat:
    """Writes ``HEARTBEAT`` to pipes every ``interval`` seconds without ever blocking.

        beat = Heartbeat([process.stdin for process in supervisors])
        while running:
            beat.tick()          # writes when an interval has passed; cheap otherwise
            time.sleep(0.1)
    """

    def __init__(self, pipes: Iterable[IO[bytes]], interval: float = HEARTBEAT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pipes = [pipe for pipe in pipes if pipe is not None]
        self.interval = interval
        self._clock = clock
        self._next = clock() + interval
        for pipe in self.pipes:
            with contextlib.suppress(OSError, ValueError):
                os.set_blocking(pipe.fileno(), False)

    def tick(self) -> None:
        """Write one heartbeat to every open pipe if an interval has passed since the last one."""
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self.interval
        for pipe in self.pipes:
            write_nonblocking(pipe, HEARTBEAT)


def write_nonblocking(pipe: IO[bytes], data: bytes) -> bool:
    """Write ``data`` to ``pipe`` if it fits now; a full, closed or broken pipe is skipped.
    Whether it was written."""
    try:
        if pipe.closed:
            return False
        return os.write(pipe.fileno(), data) == len(data)
    except (BlockingIOError, BrokenPipeError, ValueError, OSError):
        return False
