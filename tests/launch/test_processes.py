"""tfdist.launch.processes and the supervision built on it (tfdist.launch.remote_task), run locally:
heartbeats that never block, a supervisor that stops its task when the heartbeats stop (shell mode
and spec mode), and the grace period kept when a task exits by itself."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from support import nested_signal, process_gone, subprocess_env
from tfdist.launch.processes import (
    HEARTBEAT,
    Heartbeat,
    group_alive,
    start_group,
    stop_group,
    write_nonblocking,
)
from tfdist.launch import processes
from tfdist.launch.remote import TaskSpec

# prints its group and a grandchild's pid, then sleeps: the supervisor must stop both
_TASK = ("import os, subprocess, sys, time; "
         "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
         "print('pgid', os.getpgid(0), 'child', c.pid, flush=True); time.sleep(600)")


def _wait_gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(process_gone(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _beat_for(process: subprocess.Popen, seconds: float, interval: float = 0.3) -> None:
    beat = Heartbeat([process.stdin], interval=interval)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        beat.tick()
        assert process.poll() is None, "the supervisor stopped while heartbeats were coming"
        time.sleep(0.05)


def _check_heartbeats_keep_it_and_silence_stops_it(process: subprocess.Popen, silence: float) -> None:
    words = process.stdout.readline().decode().split()
    seen = dict(zip(words[::2], words[1::2]))
    pids = [int(seen["pgid"]), int(seen["child"])]
    try:
        _beat_for(process, 3 * silence)  # well past the timeout: the heartbeats keep the task
        assert not process_gone(pids[0]) and not process_gone(pids[1])
        start = time.monotonic()  # now the launcher goes silent, stdin stays open (a cut link)
        assert process.wait(timeout=60) == 128 + signal.SIGTERM
        assert time.monotonic() - start >= silence * 0.9
        assert _wait_gone(pids, 10), "the task's group outlived the supervisor"
        assert b"no heartbeat from the launcher" in process.stderr.read()
    finally:
        process.kill()
        process.wait()
        _kill(pids)


def test_shell_mode_stops_the_group_when_heartbeats_stop():
    process = subprocess.Popen([sys.executable, "-m", "tfdist.launch.remote_task", "--shell",
                                f"{sys.executable} -c \"{_TASK}\"", "--grace", "1",
                                "--heartbeat-timeout", "2"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=subprocess_env())
    _check_heartbeats_keep_it_and_silence_stops_it(process, 2.0)


def test_spec_mode_stops_the_task_when_heartbeats_stop(tmp_path):
    spec = TaskSpec("worker:0", (sys.executable, "-c", _TASK), str(tmp_path), {}, None, 1.0)
    process = subprocess.Popen([sys.executable, "-m", "tfdist.launch.remote_task",
                                "--heartbeat-timeout", "2"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=subprocess_env())
    process.stdin.write(spec.encode())
    process.stdin.flush()
    _check_heartbeats_keep_it_and_silence_stops_it(process, 2.0)


def test_shell_mode_exits_with_the_commands_code_and_keeps_its_output():
    process = subprocess.Popen([sys.executable, "-m", "tfdist.launch.remote_task", "--shell",
                                "echo out; echo err >&2; exit 5"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())
    try:
        assert process.wait(timeout=60) == 5
        assert process.stdout.read() == b"out\n" and process.stderr.read() == b"err\n"
    finally:
        process.kill()
        process.wait()
        process.stdin.close()


def test_a_task_that_exits_by_itself_leaves_its_group_the_grace_period(tmp_path):
    # the leader exits at once; what it left in its group traps TERM and needs a moment to clean up
    marker = tmp_path / "cleaned"
    script = (f"trap 'sleep 0.5; echo done > {marker}; exit 0' TERM; "
              "echo ready; while :; do sleep 0.1; done")
    leader = f"sh -c \"{script}\" & sleep 1"
    process = start_group(["sh", "-c", leader])
    try:
        process.wait(timeout=30)
        assert group_alive(process.pid)
        assert stop_group(process, grace=10) is False
        assert marker.read_text() == "done\n"
        assert not group_alive(process.pid)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_stop_group_kills_what_ignores_term():
    process = start_group(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
    time.sleep(0.3)
    start = time.monotonic()
    assert stop_group(process, grace=0.5) is True
    assert process.returncode == -signal.SIGKILL
    assert time.monotonic() - start < 30
    deadline = time.monotonic() + 10  # the killed `sleep` may be a zombie for a moment
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(process.pid)


def test_heartbeats_never_block_on_a_full_or_broken_pipe():
    read_end, write_end = os.pipe()
    pipe = os.fdopen(write_end, "wb", buffering=0)
    clock = [0.0]
    beat = Heartbeat([pipe], interval=2.0, clock=lambda: clock[0])
    beat.tick()  # not yet: the first heartbeat is due one interval after the start
    clock[0] = 2.0
    beat.tick()
    assert os.read(read_end, 10) == HEARTBEAT
    while write_nonblocking(pipe, b"x" * 4096):  # fill the pipe: a cut link stops the ssh client reading
        pass
    start = time.monotonic()
    for _ in range(5):
        clock[0] += 2.0
        beat.tick()
    assert time.monotonic() - start < 5  # returned at once instead of blocking forever
    os.close(read_end)
    clock[0] += 2.0
    beat.tick()  # broken pipe: ignored
    pipe.close()
    beat.tick()  # closed: ignored


def test_heartbeat_writes_only_once_per_interval():
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb", buffering=0) as pipe:
        clock = [10.0]
        beat = Heartbeat([pipe], interval=2.0, clock=lambda: clock[0])
        for now in (10.5, 12.0, 12.5, 13.9, 14.0):
            clock[0] = now
            beat.tick()
    with os.fdopen(read_end, "rb") as reader:
        assert reader.read() == HEARTBEAT * 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux only")
def test_a_started_group_dies_with_its_parent(tmp_path):
    # a parent that starts a sleeper with start_group and is then SIGKILLed
    code = ("import sys, time; from tfdist.launch.processes import start_group; "
            "p = start_group(['sleep', '600']); print(p.pid, flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=subprocess_env())
    child = int(parent.stdout.readline())
    try:
        parent.kill()
        parent.wait()
        assert _wait_gone([child], 20)
    finally:
        _kill([child])
        parent.stdout.close()


def test_stop_signals_only_set_the_flag_and_restore_the_handlers():
    before = {sig: signal.getsignal(sig) for sig in processes.STOP_SIGNALS}
    with processes.StopSignals() as guard:
        assert not guard.stopped.is_set()
        os.kill(os.getpid(), signal.SIGTERM)  # would end pytest without the guard
        assert guard.stopped.wait(5)
        guard.quiet()
        os.kill(os.getpid(), signal.SIGHUP)  # ignored during teardown
    assert {sig: signal.getsignal(sig) for sig in processes.STOP_SIGNALS} == before


@pytest.mark.parametrize("handler, where", [("once", "in-handler"), ("stop_signals", "in-handler"),
                                            ("stop_signals", "in-wait")])
def test_a_signal_inside_the_stop_handler_or_the_wait_on_it_still_stops(handler, where):
    """A parent-death SIGTERM comes once per reparenting (a SIGKILLed multi-threaded launcher): a second
    one reached a handler still inside Event.set, and a first one could land while the supervisor's main
    thread sat in Event.wait; both deadlocked on the Event's lock. handler_once returns from the nested
    call; StopSignals' flag takes no lock at all."""
    assert nested_signal(handler, where, deadlock_after=60) == "set"


@pytest.mark.parametrize("handler, where", [("bare", "in-handler"), ("once", "in-wait")])
def test_an_event_set_from_a_handler_deadlocks_where_the_tests_above_land_the_signal(handler, where):
    """Why handler_once and StopFlag exist, and proof that the scenarios above are the deadlock: a bare
    Event handler re-entered inside Event.set, and an Event the main thread waits on, even with
    handler_once, wait forever for the lock their own thread holds."""
    assert nested_signal(handler, where, deadlock_after=3) == "deadlocked"


def test_close_stdins_ends_a_supervisor_that_waits_on_its_stdin():
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    processes.close_stdins([process], wait=30)
    assert process.poll() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="marked processes are found in /proc")
def test_kill_marked_ends_what_left_its_group_and_only_that():
    """A process that starts its own session (as horovodrun's ranks do) escapes a group kill; its
    marker finds it. A process with another token is left alone."""
    token = f"t{os.getpid()}x{time.monotonic_ns()}"
    escaped = subprocess.Popen(["setsid", "sleep", "600"], env={**os.environ, "TFDIST_TEST_MARK": token})
    other = subprocess.Popen(["sleep", "600"], env={**os.environ, "TFDIST_TEST_MARK": token + "-other"})
    try:
        deadline = time.monotonic() + 30
        while processes.marked_pids("TFDIST_TEST_MARK", token) != [escaped.pid] and time.monotonic() < deadline:
            time.sleep(0.05)  # setsid execs sleep in place: the same pid
        assert processes.marked_pids("TFDIST_TEST_MARK", token) == [escaped.pid]
        assert processes.kill_marked("TFDIST_TEST_MARK", token, pause=0.05) == [escaped.pid]
        assert escaped.wait(timeout=30) == -signal.SIGKILL
        assert processes.marked_pids("TFDIST_TEST_MARK", token) == []
        assert other.poll() is None
        assert processes.marked_pids("TFDIST_TEST_MARK", token, proc="/nonexistent") == []
    finally:
        _kill([escaped.pid, other.pid])
        escaped.wait()
        other.wait()


def test_a_marked_process_caught_mid_exec_is_still_found_and_kernel_threads_are_skipped(tmp_path):
    """A process in the middle of execve reads as an empty environment for an instant; a sweep then
    must not miss it (the flake that showed it: kill_marked finding nothing right after marked_pids had
    found the pid). Kernel threads and zombies (no executable) are skipped at once."""
    token = "tok"
    exec_ing, kernel_thread = tmp_path / "4242", tmp_path / "2"
    for folder in (exec_ing, kernel_thread):
        folder.mkdir()
        (folder / "environ").write_bytes(b"")
    (exec_ing / "exe").symlink_to("/bin/sleep")
    environment = b"PATH=/bin\0TFDIST_TEST_MARK=tok\0"
    timer = threading.Timer(0.02, (exec_ing / "environ").write_bytes, [environment])
    timer.start()
    try:
        assert processes.marked_pids("TFDIST_TEST_MARK", token, proc=str(tmp_path)) == [4242]
    finally:
        timer.cancel()
    (exec_ing / "environ").write_bytes(b"")  # empty for good: given up on after the retries
    assert processes.marked_pids("TFDIST_TEST_MARK", token, proc=str(tmp_path)) == []


def test_stop_process_signals_the_process_alone_and_kills_it_after_the_grace():
    """A launcher in its caller's group (the lab benchmarks' LabRunner.stop): only it gets the SIGTERM."""
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    assert processes.stop_process(polite, grace=30) is False and polite.returncode == -signal.SIGTERM
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
    time.sleep(0.3)  # the trap is set
    assert processes.stop_process(stubborn, grace=0.5) is True and stubborn.returncode == -signal.SIGKILL
    assert processes.stop_process(stubborn, grace=0.5) is False  # already gone: only reaped
