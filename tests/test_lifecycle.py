"""The serving-task lifecycle with a fake clock, probe and exit (two tests use a real socket): no waiting."""
from __future__ import annotations

import socket
import threading

from tfdist import lifecycle


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _probe_from(timeline: dict[str, list[tuple[float, float]]], clock: FakeClock):
    """A probe that answers for an address while the clock is inside one of its (start, end) spans."""
    return lambda address: any(start <= clock.now < end for start, end in timeline.get(address, []))


def test_wait_for_tasks_names_the_tasks_that_never_answer():
    clock = FakeClock()
    probe = _probe_from({"h:1": [(0, 1e9)], "h:2": [(3, 1e9)]}, clock)
    missing = lifecycle.wait_for_tasks({"worker:0": "h:1", "worker:1": "h:9", "ps:0": "h:2"}, timeout=10,
                                       probe=probe, clock=clock, sleep=clock.sleep)
    assert missing == ["worker:1"]
    assert 10 <= clock.now <= 11


def test_wait_for_tasks_returns_as_soon_as_all_answer():
    clock = FakeClock()
    probe = _probe_from({"h:1": [(2, 1e9)]}, clock)
    assert lifecycle.wait_for_tasks({"ps:0": "h:1"}, timeout=60, probe=probe, clock=clock, sleep=clock.sleep) == []
    assert clock.now < 3


def test_a_server_waits_out_the_grace_for_a_restarted_chief():
    clock = FakeClock()
    # the chief runs 5-20, is down 20-24 (restarting), runs again 24-40
    probe = _probe_from({"c:1": [(5, 20), (24, 40)]}, clock)
    finished = lifecycle.wait_for_chief_to_finish("c:1", grace=10, startup_timeout=60, probe=probe,
                                                  clock=clock, sleep=clock.sleep)
    assert finished is True
    assert clock.now >= 50  # stayed through the 4 s gap; left 10 s after the chief's final exit


def test_a_server_gives_up_when_the_chief_never_comes():
    clock = FakeClock()
    finished = lifecycle.wait_for_chief_to_finish("c:1", grace=5, startup_timeout=30, probe=lambda a: False,
                                                  clock=clock, sleep=clock.sleep)
    assert finished is False and 30 <= clock.now <= 32


def test_serve_starts_the_server_then_exits_with_the_chiefs_verdict(capsys):
    events: list[object] = []
    lifecycle.serve_until_chief_leaves("ps:0", lambda: events.append("started"), "c:1", 5, 60,
                                       exit=events.append, wait=lambda *args: True)
    lifecycle.serve_until_chief_leaves("ps:0", lambda: events.append("started"), "c:1", 5, 60,
                                       exit=events.append, wait=lambda *args: False)
    assert events == ["started", 0, "started", 1]
    assert "ps:0 serving; waiting for the chief at c:1" in capsys.readouterr().err


def test_the_evaluator_watch_exits_from_its_thread():
    codes: list[int] = []
    thread = lifecycle.exit_when_chief_leaves("c:1", 5, 60, exit=codes.append, wait=lambda *args: True)
    thread.join(timeout=10)
    assert codes == [0] and thread.daemon


def test_reachable_sees_a_listening_socket_and_not_a_closed_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        assert lifecycle.reachable(address)
    assert not lifecycle.reachable(address)
    assert not lifecycle.reachable("not-an-address")


def test_a_task_killed_a_moment_ago_is_named_once_its_socket_is_gone():
    """A SIGKILLed ps still accepted connections while the kernel tore it down, so the chief's error
    said it lost "a task it cannot name" (seen under load in the suite's killed-ps test)."""
    clock = FakeClock()
    probe = _probe_from({"h:1": [(0, 1e9)], "h:2": [(0, 1.3)]}, clock)  # ps:0 listens 1.3 s more
    assert lifecycle.silent_tasks({"worker:0": "h:1", "ps:0": "h:2"}, probe=probe, clock=clock,
                                  sleep=clock.sleep) == ["ps:0"]
    assert 1.3 <= clock.now - lifecycle.COMPANION_SECONDS < 2  # then the others, for tasks that died with it


def test_silent_tasks_waits_for_companions_once_one_is_silent_and_settles_when_none_is():
    clock = FakeClock()
    probe = _probe_from({"h:1": [(0, 1e9)]}, clock)
    assert lifecycle.silent_tasks({"worker:0": "h:1", "ps:0": "h:2"}, probe=probe, clock=clock,
                                  sleep=clock.sleep) == ["ps:0"]
    assert lifecycle.COMPANION_SECONDS <= clock.now < lifecycle.COMPANION_SECONDS + 1  # not the settle time
    clock.now = 0
    assert lifecycle.silent_tasks({"worker:0": "h:1"}, settle=3, probe=probe, clock=clock, sleep=clock.sleep) == []
    assert 3 <= clock.now < 4
    clock.now = 0
    assert lifecycle.silent_tasks({"ps:0": "h:2", "ps:1": "h:3"}, probe=probe, clock=clock,
                                  sleep=clock.sleep) == ["ps:0", "ps:1"]
    assert clock.now == 0  # every task is silent: nothing left to wait for


def test_tasks_killed_together_are_all_named_though_their_sockets_close_apart():
    """The two ps tasks of a host killed together: ps:1's socket outlived ps:0's by 0.8 s, and the
    chief named ps:0 alone, as if ps:1 still held its variables."""
    clock = FakeClock()
    probe = _probe_from({"h:1": [(0, 1e9)], "h:3": [(0, 0.8)]}, clock)  # ps:0 (h:2) gone at once
    assert lifecycle.silent_tasks({"worker:0": "h:1", "ps:0": "h:2", "ps:1": "h:3"}, probe=probe, clock=clock,
                                  sleep=clock.sleep) == ["ps:0", "ps:1"]


def test_a_socket_that_closes_a_moment_after_the_failure_is_named():
    """The same with a real listening socket, closed half a second after the first probe, and the
    defaults: before the fix the answer was empty (every task answered once)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    closing = threading.Timer(0.5, server.close)
    closing.start()
    try:
        assert lifecycle.silent_tasks({"ps:0": address}) == ["ps:0"]
    finally:
        closing.cancel()
        server.close()


def test_two_real_sockets_closed_half_a_second_apart_are_both_named():
    first, second = socket.socket(), socket.socket()
    for server in (first, second):
        server.bind(("127.0.0.1", 0))
        server.listen()
    addresses = {f"ps:{i}": f"127.0.0.1:{server.getsockname()[1]}" for i, server in enumerate((first, second))}
    first.close()
    closing = threading.Timer(0.5, second.close)
    closing.start()
    try:
        assert lifecycle.silent_tasks(addresses) == ["ps:0", "ps:1"]
    finally:
        closing.cancel()
        second.close()
