"""The probe's compute phase (tfdist/probe/driver.py ``measure_compute``) and the compute agent's
'ready'/'go' protocol (tfdist/probe/agent.py), without TensorFlow: real agent processes (``probe_agent.main``,
its stdin watcher, its gate) whose ``compute`` is replaced by a stand-in that sleeps instead of building
a model and writes what it does to an events file. Lines appended to one file by several processes keep
the order of their writes, so the file is the order of events across the hosts."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from support import process_gone

from tfdist.probe import agent as probe_agent
from tfdist.probe.driver import Agent, ProbeError, measure_compute

#: ``python -c FAKE HOST EVENTS BEHAVIOUR``: the real agent with a stand-in compute. BEHAVIOUR: seconds
#: of start-up, "fail" (an error answer at start-up) or "hang" (never ready).
FAKE = r"""
import json, os, sys, time
from tfdist.probe import agent as probe_agent

host, events, behaviour = sys.argv[1:4]


def note(what):
    with open(events, "a") as file:
        file.write(json.dumps([host, what, os.getpid()]) + "\n")


def compute(model, batch_size, steps, min_seconds, ready=None, **_):
    note("started")
    if behaviour == "fail":
        raise probe_agent.ProbeAgentError("cannot build the model; fix: repair it")
    time.sleep(3600 if behaviour == "hang" else float(behaviour))
    note("ready")
    if ready is not None:
        ready()
    note("timing")
    time.sleep(0.2)
    note("timed")
    return {"step_ms": 10.0 * (1 + ord(host[-1]) - ord("a")), "params": 7, "dtype_bytes": 4, "host": host}


probe_agent.compute = compute
note("spawned")
sys.exit(probe_agent.main())
"""


def spec(tmp_path: Path, timeout: float = 60) -> dict:
    return {"role": "compute", "model": "m:f", "batch_size": 8, "cwd": str(tmp_path), "env": {}, "steps": 1,
            "min_seconds": 0.0, "timeout": timeout}


def starter(tmp_path: Path, behaviours: dict[str, str]):
    """A ``start`` for :func:`measure_compute` running the stand-in agent per host; its events file."""
    events = tmp_path / "events.jsonl"

    def start(host: str, given: dict) -> Agent:
        return Agent([sys.executable, "-c", FAKE, host, str(events), behaviours[host]], given, host)

    return start, events


def read(events: Path) -> list[tuple[str, str, int]]:
    return [tuple(json.loads(line)) for line in events.read_text().splitlines()] if events.exists() else []


def test_every_agent_gets_ready_before_one_host_at_a_time_is_timed(tmp_path):
    start, events = starter(tmp_path, {"a": "0.3", "b": "0", "c": "0.6"})
    logged: list[str] = []
    found = measure_compute(["a", "b", "c"], spec(tmp_path), start, log=logged.append)
    order = [(host, what) for host, what, _ in read(events)]
    first_timing = next((i for i, (_, what) in enumerate(order) if what == "timing"), None)
    assert first_timing is not None, order
    assert {host for host, what in order[:first_timing] if what == "ready"} == {"a", "b", "c"}, order
    timings = [(host, what) for host, what in order if what in ("timing", "timed")]
    assert timings == [("a", "timing"), ("a", "timed"), ("b", "timing"), ("b", "timed"), ("c", "timing"),
                       ("c", "timed")]  # in the hosts' order, never two at once
    assert {host: answer["step_ms"] for host, answer in found.items()} == {"a": 10.0, "b": 20.0, "c": 30.0}
    assert all(answer["host"] == host for host, answer in found.items())
    assert logged == [f"timing m:f on {host} (batch 8)" for host in "abc"]
    assert all(process_gone(pid) for _, _, pid in read(events))


def test_a_host_failing_at_start_up_is_named_at_once_and_the_others_are_closed(tmp_path):
    start, events = starter(tmp_path, {"a": "hang", "b": "fail", "c": "0"})
    with pytest.raises(ProbeError, match=r"^b: cannot build the model; fix: repair it$"):
        measure_compute(["a", "b", "c"], spec(tmp_path), start, ready_timeout=120)
    seen = read(events)
    assert {host for host, what, _ in seen if what == "spawned"} == {"a", "b", "c"}
    assert not [event for event in seen if event[1] == "timing"]  # a still starting: nobody was timed
    assert all(process_gone(pid) for _, _, pid in seen), seen


def test_a_host_that_never_gets_ready_fails_within_the_timeout_naming_it(tmp_path):
    start, events = starter(tmp_path, {"a": "0", "b": "hang"})
    began = time.monotonic()
    with pytest.raises(ProbeError, match=r"^b did not get ready .*within 3 s; fix: "):
        measure_compute(["a", "b"], spec(tmp_path), start, ready_timeout=3)
    assert time.monotonic() - began < 60  # a bound against a hang, not a timing
    seen = read(events)
    assert not [event for event in seen if event[1] == "timing"]  # a was not timed before b was ready
    assert all(process_gone(pid) for _, _, pid in seen), seen


def test_a_waiting_compute_agent_leaves_when_its_stdin_ends_or_its_timeout_passes(tmp_path):
    """The real agent's gate: 'ready' after the start-up, no timing without 'go'; EXIT_ABANDONED when the
    prober closes stdin, and when the hard timeout passes with stdin still open; after 'go' the result."""
    start, events = starter(tmp_path, {"a": "0", "b": "0", "c": "0"})
    closed = start("a", spec(tmp_path))
    assert closed.answer(60) == {"ready": True}
    closed.process.stdin.close()
    assert closed.process.wait(timeout=60) == probe_agent.EXIT_ABANDONED
    expired = start("b", spec(tmp_path, timeout=3))
    assert expired.answer(60) == {"ready": True}
    assert expired.process.wait(timeout=60) == probe_agent.EXIT_ABANDONED  # stdin still open
    expired.close()
    released = start("c", spec(tmp_path))
    assert released.answer(60) == {"ready": True}
    released.go()
    assert released.answer(60)["step_ms"] == 30.0
    assert released.process.wait(timeout=60) == 0
    released.close()
    timed = [host for host, what, _ in read(events) if what == "timing"]
    assert timed == ["c"]


def test_a_go_read_with_the_specification_line_is_not_lost_and_eof_abandons():
    """The agent reads its spec from the file descriptor (never Python's stdin buffer, which a blocked
    watcher thread would hold at exit): bytes read past the first line still count as a 'go'."""
    import os
    import threading

    read_end, write_end = os.pipe()
    os.write(write_end, b'{"role": "send"}\ngo\n')
    with os.fdopen(read_end, "rb") as stdin:
        line, read, pending = probe_agent._read_spec(stdin)
        assert (line, pending) == (b'{"role": "send"}\n', b"go\n")
        go, ended = threading.Event(), threading.Event()
        probe_agent._watch_stdin(read, pending, ended.set, go)
        assert go.wait(30) and not ended.is_set()
        os.close(write_end)
        assert ended.wait(30)
