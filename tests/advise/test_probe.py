"""`tfdist advise --probe` without hosts: the aggregation of made-up measurements (tfdist/probe/result.py),
the agent's specification, answers and link timing (tfdist/probe/agent.py, wire.py), and the CLI's option checks."""
from __future__ import annotations

import io
import json
import os
import socket
import struct
import sys
import threading
import time

import pytest
from support import invoke, usage_error

from tfdist.advise import Cluster, Workload, advise
from tfdist.probe import agent, wire
from tfdist.probe.driver import (
    Agent,
    LinkMeasure,
    ProbeError,
    aggregate,
    default_workers,
    measure_link,
    measure_links,
    measured_hosts,
    ring,
)
from tfdist.launch.hosts import parse_hosts, place_tasks

MBIT, GBIT = 1e6, 1e9
SLOTS = parse_hosts("w1:1,w2:1,p:1")


def link(source, target, mbit, latency_ms=0.1):
    return LinkMeasure(source, target, mbit * MBIT, latency_ms / 1000)


def lab_links(slow="w2", slow_mbit=50, fast_mbit=2000):
    """The links of the w1, w2, p ring (both ways) when ``slow``'s link runs at ``slow_mbit``."""
    return [link(a, b, slow_mbit if slow in (a, b) else fast_mbit, 0.05 if slow not in (a, b) else 0.2)
            for a, b in ring(["w1", "w2", "p"])]


# --- pure aggregation ---------------------------------------------------------------------------------
def test_ring_goes_round_both_ways_and_two_hosts_both_directions():
    assert ring(["a", "b"]) == [("a", "b"), ("b", "a")]
    assert ring(["a", "b", "c"]) == [("a", "b"), ("b", "c"), ("c", "a"), ("b", "a"), ("c", "b"), ("a", "c")]
    with pytest.raises(ProbeError, match="two hosts or more.*fix: "):
        ring(["a"])


def test_a_slow_host_does_not_make_its_fast_neighbours_slow():
    result = aggregate(SLOTS, lab_links())
    rates = {h.host: h.rate_bps for h in result.hosts}
    assert rates == {"w1": 2000 * MBIT, "w2": 50 * MBIT, "p": 2000 * MBIT}


def test_a_host_rate_is_the_smaller_of_its_best_send_and_best_receive():
    links = [link("a", "b", 900), link("b", "a", 40)]  # b sends slowly (shaped one way), receives fast
    rates = {h.host: h.rate_bps for h in aggregate(parse_hosts("a,b"), links).hosts}
    assert rates == {"a": 40 * MBIT, "b": 40 * MBIT}
    links = [link("a", "b", 900), link("b", "c", 30), link("c", "a", 800),
             link("b", "a", 900), link("c", "b", 30), link("a", "c", 800)]
    rates = {h.host: h.rate_bps for h in aggregate(parse_hosts("a,b,c"), links).hosts}
    assert rates == {"a": 900 * MBIT, "b": 900 * MBIT, "c": 800 * MBIT}


def test_latency_is_the_median_and_speeds_are_relative_to_the_fastest():
    result = aggregate(SLOTS, lab_links(), steps={"w1": 20.0, "w2": 80.0}, params=85_002, dtype_bytes=4,
                       batch_size=64)
    assert result.latency_s == pytest.approx(0.2e-3)  # 4 of the 6 links touch w2
    assert result.host("w1").latency_s == pytest.approx(0.125e-3)  # two links each way: 0.2 and 0.05
    speeds = {h.host: h.speed for h in result.hosts}
    assert speeds == {"w1": 1.0, "w2": 0.25, "p": 1.0}
    assert result.step_ms == 20.0 and result.host("p").step_ms is None


def test_cluster_and_workload_from_the_measurements():
    result = aggregate(SLOTS, lab_links(), steps={"w1": 20.0, "w2": 80.0}, params=85_002, dtype_bytes=4,
                       batch_size=64)
    cluster = result.to_cluster(workers=2, ps=1)
    assert cluster == Cluster(workers=2, bandwidths=(2000 * MBIT / 8, 50 * MBIT / 8), speeds=(1.0, 0.25),
                              ps=1, ps_placement="separate", ps_bandwidth=2000 * MBIT / 8, latency_s=0.2e-3)
    assert result.to_workload(64) == Workload(params=85_002, batch_size=64, step_ms=20.0, dtype_bytes=4)
    assert advise(cluster, result.to_workload(64)).recommended == "parameter_server"


def test_the_ps_link_is_the_slowest_ps_host_and_colocated_when_it_shares_a_worker_host():
    slots = parse_hosts("a:2,b:2")
    links = [link("a", "b", 800), link("b", "a", 800)]
    cluster = aggregate(slots, links).to_cluster(workers=3, ps=1)  # ps on b beside worker:2
    assert cluster.ps_placement == "colocated" and cluster.ps_bandwidth == 100e6
    assert cluster.workers_per_host == 1 and len(cluster.bandwidths) == 3  # uneven: 2 on a, 1 on b
    assert cluster.bandwidths == (50e6, 50e6, 100e6)  # a's link shared by its two workers
    even = aggregate(slots, links).to_cluster(workers=4, ps=0)
    assert even.workers_per_host == 2 and even.bandwidths == (100e6, 100e6) and even.ps == 0


def test_without_a_model_the_workload_needs_params_and_step_ms():
    result = aggregate(SLOTS, lab_links())
    with pytest.raises(ProbeError.__mro__[1], match="--step-ms.*fix: give --step-ms"):
        result.to_workload(64)
    workload = result.to_workload(64, step_ms=10.0, params=1000)
    assert workload.dtype_bytes == 4 and workload.step_ms == 10.0
    assert result.to_cluster(2, 1).speeds == (1.0, 1.0)


def test_the_measured_hosts_and_default_workers_follow_launch_placement():
    slots = parse_hosts("a:2,b:1,c:1")
    assert default_workers(slots, 1) == 3
    placed = place_tasks(slots, 3, 1)
    assert [p.host for p in placed if p.task_type == "worker"] == ["a", "a", "b"]
    assert measured_hosts(slots, 3, 1) == (["a", "b", "c"], ["a", "b"])
    assert measured_hosts(parse_hosts("a:1,b:1,c:1"), 1, 1) == (["a", "c"], ["a"])  # b gets nothing
    with pytest.raises(ProbeError, match="none left for a worker"):
        default_workers(parse_hosts("a:1"), 1)


def test_a_model_without_a_batch_size_is_refused_before_anything_runs():
    from tfdist.probe.driver import probe_hosts

    with pytest.raises(ProbeError, match="--model needs --batch-size; fix: add e.g. --batch-size 64"):
        probe_hosts("nosuchhost-a,nosuchhost-b", 1, 1, model="m:f")


def test_as_dict_is_json():
    result = aggregate(SLOTS, lab_links(), steps={"w1": 20.0, "w2": 80.0}, params=10, dtype_bytes=4)
    data = json.loads(json.dumps(result.as_dict()))
    assert data["hosts"]["w2"]["rate_bps"] == 50e6 and data["params"] == 10 and len(data["links"]) == 6


# --- the agent ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, message", [
    (b"", "no probe specification"),
    (b"{nope", "not JSON"),
    (b'{"role": "dance", "timeout": 5}', "role is 'dance'"),
    (b'{"role": "send", "timeout": 5, "peer": "a"}', "lacks port, seconds, pings"),
    (b'{"role": "receive", "host": "a", "seconds": 1, "skip": 0.2, "timeout": 0}', "timeout must be"),
])
def test_bad_specifications_are_refused_with_the_fix(line, message):
    with pytest.raises(agent.ProbeAgentError, match=message) as caught:
        agent.decode_spec(line)
    assert "fix: " in str(caught.value)


def test_main_answers_an_error_line_for_a_bad_spec():
    out = io.StringIO()
    assert agent.main(io.BytesIO(b"[]\n"), out) == agent.EXIT_FAILED
    assert "role is 'list'" in agent.parse_answer(out.getvalue())["error"]


def test_answers_are_found_among_other_output():
    out = io.StringIO()
    print("some model printed this", file=out)
    agent.answer({"result": {"step_ms": 3.5}}, out)
    assert agent.parse_answer(out.getvalue() + "trailing noise\n") == {"result": {"step_ms": 3.5}}
    assert agent.parse_answer("nothing here\n") is None
    assert agent.parse_answer(wire.MARKER + "{broken\n") is None


def test_the_rate_skips_the_burst():
    burst = [(0.0, 0), (0.05, 10_000_000)]  # 10 MB in the first 50 ms (a token bucket's burst)
    steady = [(0.2 + i * 0.1, 10_000_000 + int(i * 625_000)) for i in range(14)]  # 50 Mbit/s after it
    bits, _, seconds = agent.rate_after_skip(burst + steady, skip=0.2)
    assert bits == pytest.approx(50e6, rel=1e-3) and seconds == pytest.approx(1.3)
    bits_all, _, _ = agent.rate_after_skip(burst + steady, skip=0.0)
    assert bits_all > 1.5 * bits  # without the skip the burst inflates it
    with pytest.raises(agent.ProbeAgentError, match="too short"):
        agent.rate_after_skip([(0.0, 5)], skip=0.2)


def test_a_transfer_is_steady_once_its_rate_so_far_has_settled():
    burst = [(0.0, 0), (0.05, 10_000_000)]
    steady = [(0.2 + i * 0.01, 10_000_000 + i * 62_500) for i in range(40)]  # 50 Mbit/s in 10 ms reads
    assert agent.steady(burst + steady, skip=0.2)  # 0.59 s in: the rate up to now, 0.1 and 0.2 s ago agree
    assert not agent.steady(burst + steady[:25], skip=0.2)  # 0.44 s in: too short after the skip
    assert not agent.steady(burst + steady, skip=0.0)  # the burst counted: the rate is still falling
    lumpy = [(0.2 + i * 0.05, 10_000_000 + i * 312_500) for i in range(9)]  # 50 Mbit/s in 50 ms reads
    assert agent.steady(burst + lumpy, skip=0.2)  # windows that split a read are interpolated
    ramp = [(0.2 + i * 0.01, 10_000_000 + 1000 * i * i) for i in range(60)]  # still speeding up
    assert not agent.steady(burst + ramp, skip=0.2)
    spurt = [(t, b + (312_500 if t > 0.49 else 0)) for t, b in steady]  # 50 % more in the last window
    assert not agent.steady(burst + spurt, skip=0.2)
    assert not agent.steady([(0.0, 0), (1.0, 0), (2.0, 0)], skip=0.2)  # nothing moved
    # one read after the burst: three rates on one interpolated line would agree, at the burst's rate
    assert not agent.steady([(0.0, 0), (0.05, 10_000_000), (0.6, 10_100_000)], skip=0.2)
    stalled = [(t, b) for t, b in steady if not 0.3 < t < 0.45]  # no read for 150 ms after the skip
    assert not agent.steady(burst + stalled, skip=0.2)
    assert not agent.steady([(0.0, 0)], skip=0.2)


def _paced_sender(port: int, bytes_per_s: float, seconds: float, seen: dict) -> None:
    """A sender of ``bytes_per_s`` (no agent) that pings once, then sends until reset or ``seconds``."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(wire.PING)
        assert conn.recv(1) == wire.PING
        conn.sendall(wire.DATA)
        begun, sent, chunk = time.monotonic(), 0, b"x" * 16384
        try:
            while time.monotonic() - begun < seconds:
                if sent < bytes_per_s * (time.monotonic() - begun):
                    conn.sendall(chunk)
                    sent += len(chunk)
                else:
                    time.sleep(0.001)
            conn.shutdown(socket.SHUT_WR)
        except (ConnectionResetError, BrokenPipeError):
            seen["reset_after"] = time.monotonic() - begun


def test_the_receiver_ends_a_steady_transfer_by_a_reset_and_times_what_came():
    out, result, seen = io.StringIO(), {}, {}
    server = threading.Thread(target=lambda: result.update(agent.receive("127.0.0.1", 20, 0.2, out,
                                                                          stop_when_steady=True)))
    server.start()
    for _ in range(200):
        if agent.parse_answer(out.getvalue()):
            break
        time.sleep(0.05)
    _paced_sender(agent.parse_answer(out.getvalue())["port"], 4e6, 20, seen)  # 32 Mbit/s for 20 s at most
    server.join(30)
    assert result["steady_stop"] is True and "reset_after" in seen
    assert seen["reset_after"] < 15 and result["timed_seconds"] < 15  # not the 20 s it was given
    assert result["rate_bps"] == pytest.approx(32e6, rel=0.15)


def test_a_sender_reset_by_its_receiver_ends_its_transfer_without_an_error():
    """The real sender against a receiver that resets after 1 MB (as a steady receiver does)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        done = {}
        sender = threading.Thread(target=lambda: done.update(agent.send("127.0.0.1", port, 30, 3)))
        sender.start()
        conn, _ = server.accept()
        with conn:
            while (byte := conn.recv(1)) == wire.PING:
                conn.sendall(wire.PING)
            assert byte == wire.DATA
            got = 0
            while got < 2**20:
                got += len(conn.recv(65536))
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sender.join(20)
    assert not sender.is_alive() and done["stopped"] is True and done["sent_bytes"] >= 2**20


def test_a_model_without_input_shape_names_model_and_the_fix():
    class NoInput:
        @property
        def inputs(self):
            raise AttributeError("The layer has never been called")

    with pytest.raises(agent.ProbeAgentError, match="--model 'm:f'.*fix: give the model an Input"):
        agent.shapes_of(NoInput(), "m:f")

    class Tensor:
        def __init__(self, shape, dtype="float32"):
            self.shape, self.dtype = shape, dtype

    class Shaped:
        inputs, output_shape = [Tensor((None, 64))], (None, 10)

    assert agent.shapes_of(Shaped(), "m:f") == ([((64,), "float32")], (10,))
    Shaped.inputs = [Tensor((None,), "int64"), Tensor((None, 3), "int32")]  # two id inputs
    assert agent.shapes_of(Shaped(), "m:f") == ([((), "int64"), ((3,), "int32")], (10,))
    Shaped.inputs = [Tensor((None, None))]
    with pytest.raises(agent.ProbeAgentError, match="unknown dimensions"):
        agent.shapes_of(Shaped(), "m:f")


@pytest.mark.parametrize("model, message", [("nocolon", "is not module:function"),
                                            ("no_such_module_x:f", "cannot import no_such_module_x"),
                                            ("json:no_such_function", "has no function")])
def test_bad_model_names_are_refused(model, message):
    with pytest.raises(agent.ProbeAgentError, match=message):
        agent.load_build_fn(model)


def test_a_link_measured_over_loopback_by_real_agents():
    """Two agent processes (no TensorFlow) on this machine: a rate and a latency come back."""
    def start(host, spec):
        return Agent([sys.executable, "-m", "tfdist.probe.agent"], spec, host)

    measured = measure_link("127.0.0.1", "127.0.0.1", 0.5, start)
    assert measured.rate_bps > 10e6 and 0 < measured.latency_s < 0.05
    assert measured.target_memory is not None and measured.target_memory.usable > 2**20  # the receiver's host
    assert measured.target_horovod is True  # this venv's Horovod, built with TensorFlow


def test_the_launchers_pythonpath_is_sent_as_the_tasks_search_it():
    """The tasks run in the launcher's working directory: a relative entry is taken from there, not from
    the receiver's ssh home."""
    from tfdist.probe.driver import task_pythonpath

    assert task_pythonpath({"PYTHONPATH": f"src{os.pathsep}{os.pathsep}/opt/lib"}, cwd="/work/job") == [
        "/work/job/src", "/opt/lib"]
    assert task_pythonpath({}, cwd="/work/job") == []


def test_a_receiver_finds_horovod_where_the_tasks_would_the_launchers_pythonpath_first(tmp_path, monkeypatch):
    """The launcher's PYTHONPATH (which every task gets) finds a ``horovod`` package without its
    TensorFlow extension first (Horovod installed for PyTorch only, say): the receiver, started without
    it, is told it in its specification, and reports its host without Horovod."""
    (tmp_path / "horovod" / "tensorflow").mkdir(parents=True)
    for name in ("horovod/__init__.py", "horovod/tensorflow/__init__.py"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))

    def start(host, spec):
        return Agent(["env", "-u", "PYTHONPATH", sys.executable, "-m", "tfdist.probe.agent"], spec, host)

    measured = measure_link("127.0.0.1", "127.0.0.1", 0.5, start)
    assert measured.rate_bps > 10e6 and measured.target_horovod is False


def test_links_are_set_up_at_once_and_transfer_one_at_a_time_by_real_agents():
    """Every agent starts and pings at once; each sender transfers only once the one before it ended."""
    started = []

    def start(host, spec):
        started.append(spec)
        return Agent([sys.executable, "-m", "tfdist.probe.agent"], spec, host)

    measured = measure_links([("127.0.0.1", "127.0.0.1"), ("localhost", "localhost")], 0.5, start)
    assert [(m.source, m.target) for m in measured] == [("127.0.0.1", "127.0.0.1"), ("localhost", "localhost")]
    assert all(m.rate_bps > 10e6 and 0 < m.latency_s < 0.05 for m in measured)
    assert [spec["role"] for spec in started] == ["receive", "receive", "send", "send"]
    assert all(spec["gated"] is True for spec in started[2:])
    assert all(spec["timeout"] == 2 * 0.5 + 60 for spec in started)  # a receiver waits for the links before


def test_one_transfer_at_a_time_the_agents_report_when_they_sent():
    """The second sender's transfer starts after the first's has ended: the receivers' timed windows
    do not overlap."""
    windows, timed = [], []

    class Timed(Agent):
        def answer(self, timeout, waiting="answer"):
            found = super().answer(timeout, waiting)
            if "rate_bps" in found:
                windows.append(time.monotonic())
                timed.append(found["timed_seconds"])
            return found

    def start(host, spec):
        return Timed([sys.executable, "-m", "tfdist.probe.agent"], spec, host)

    begun = time.monotonic()
    measured = measure_links([("127.0.0.1", "127.0.0.1"), ("localhost", "localhost")], 0.6, start)
    second = timed[1]  # a steady transfer may end before 0.6 s: the second took at least its own timed span
    assert len(windows) == 2 and windows[1] - windows[0] >= second > 0, (windows, timed, begun, measured)


def test_a_sender_that_does_not_wait_for_go_is_named_as_another_version():
    """An agent of an older tfdist ignores ``gated`` and transfers at once: its result is not a ready."""
    def start(host, spec):
        return Agent([sys.executable, "-m", "tfdist.probe.agent"], {k: v for k, v in spec.items() if k != "gated"},
                     host)

    with pytest.raises(ProbeError, match="127.0.0.1 sent before it was told to.*same tfdist version"):
        measure_links([("127.0.0.1", "127.0.0.1")], 0.3, start)


def test_an_agent_that_dies_is_named_with_its_host():
    probe = Agent([sys.executable, "-c", "import sys; sys.exit(7)"], {"role": "send"}, "hostx")
    with pytest.raises(ProbeError, match="checking hostx failed with exit code 7"):
        probe.answer(30)
    probe.close()


def test_the_receiver_reports_a_sender_that_is_not_an_agent():
    out = io.StringIO()
    result = {}

    def serve():
        try:
            agent.receive("127.0.0.1", 1, 0.2, out)
        except agent.ProbeAgentError as exc:
            result["error"] = str(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    for _ in range(100):
        if agent.parse_answer(out.getvalue()):
            break
        threading.Event().wait(0.05)
    port = agent.parse_answer(out.getvalue())["port"]
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"X")
    thread.join(10)
    assert "instead of a ping" in result["error"]


# --- the CLI --------------------------------------------------------------------------------------------
def run(*args: str):
    return invoke("advise", *args)


error = usage_error


PROBE = ["--probe", "--hosts", "w1:1,w2:1,p:1", "--batch-size", "64"]


@pytest.mark.parametrize("extra, flag", [(["--bandwidth", "1gbit"], "--bandwidth"),
                                         (["--latency-ms", "0.2"], "--latency-ms"),
                                         (["--ps-bandwidth", "1gbit"], "--ps-bandwidth"),
                                         (["--gpus-per-host", "2"], "--workers-per-host")])
def test_what_the_probe_measures_is_refused_beside_it(extra, flag):
    text = error(run(*PROBE, "--params", "1k", "--step-ms", "5", *extra))
    assert f"{flag} and --probe contradict" in text and f"fix: drop {flag}" in text


@pytest.mark.parametrize("extra, flag", [(["--params", "1k"], "--params"), (["--step-ms", "5"], "--step-ms"),
                                         (["--dtype-bytes", "2"], "--dtype-bytes"),
                                         (["--worker-speeds", "1,1"], "--worker-speeds")])
def test_what_the_model_measures_is_refused_beside_model(extra, flag):
    text = error(run(*PROBE, "--model", "m:f", *extra))
    assert f"--probe with --model measures {flag}" in text and "fix: drop" in text


def test_probe_needs_hosts_and_without_model_params_and_step_ms():
    text = error(run("--probe", "--batch-size", "64", "--params", "1", "--step-ms", "1"))
    assert "--probe needs --hosts" in text
    assert "does not know --step-ms" in error(run(*PROBE, "--params", "1k"))
    assert "does not know --params" in error(run(*PROBE, "--step-ms", "3"))


@pytest.mark.parametrize("extra", [["--hosts", "a,b"], ["--model", "m:f"], ["--ssh-port", "22"],
                                   ["--probe-seconds", "2"]])
def test_probe_options_without_probe_are_refused(extra):
    text = error(run("--workers", "2", "--params", "1k", "--batch-size", "8", "--step-ms", "3", "--bandwidth",
                     "1gbit", *extra))
    assert f"{extra[0]} applies only to --probe; fix: add --probe" in text


def test_without_probe_the_description_is_still_required():
    assert "Missing option '--workers'" in error(run("--params", "1k", "--batch-size", "8", "--step-ms", "3",
                                                     "--bandwidth", "1gbit"))
    assert "Missing option '--step-ms'" in error(run("--workers", "2", "--params", "1k", "--batch-size", "8",
                                                     "--bandwidth", "1gbit"))


def test_a_bad_hosts_list_is_a_usage_error():
    text = error(run(*PROBE[:2], "a,a", *PROBE[3:], "--params", "1k", "--step-ms", "3"))
    assert "lists host 'a' twice" in text


def test_probe_is_offered_in_help():
    output = run("--help").output
    assert "--probe" in output and "--hosts" in output and "--model" in output


def test_the_measured_block_and_json(monkeypatch):
    """The CLI with the probe replaced by made-up measurements: the block, the table, --json."""
    from tfdist.probe import driver as probe

    def fake(hosts, workers, ps, model=None, batch_size=None, **kwargs):
        assert (hosts, workers, ps, model, batch_size) == ("w1:1,w2:1,p:1", 2, 1, "m:f", 64)
        return aggregate(parse_hosts(hosts), lab_links(), steps={"w1": 20.0, "w2": 80.0}, params=85_002,
                         dtype_bytes=4, batch_size=64)

    monkeypatch.setattr(probe, "probe_hosts", fake)
    result = run(*PROBE, "--model", "m:f")
    assert result.exit_code == 0, result.output
    assert "Measured:\n  w1: link 2 Gbit/s, latency 0.125 ms, step 20.0 ms, speed 1.00" in result.output
    assert "  w2: link 50 Mbit/s" in result.output and "speed 0.25" in result.output
    assert "model: 85,002 params x 4 B, batch 64" in result.output
    assert "Recommended: parameter_server" in result.output
    data = json.loads(run(*PROBE, "--model", "m:f", "--json").output)
    assert data["recommended"] == "parameter_server" and data["measured"]["hosts"]["w2"]["speed"] == 0.25
    assert data["measured"]["params"] == 85_002


# --- memory -----------------------------------------------------------------------------------------------
def _with_memory(links, memory):
    """``links`` with each target's memory as its receiver reports it."""
    import dataclasses

    return [dataclasses.replace(link, target_memory=memory.get(link.target)) for link in links]


def test_each_hosts_memory_comes_from_its_receiver_and_holds_all_its_tasks():
    from tfdist.probe.host_memory import HostMemory
    from tfdist.advise.memory import HostLoad, ModelMemory, check_memory

    gib = 2**30
    memory = {"w1": HostMemory(16 * gib, 8 * gib), "w2": HostMemory(16 * gib, 12 * gib),
              "p": HostMemory(16 * gib, 15 * gib, limit=2 * gib, source="/sys/fs/cgroup/lab/memory.max")}
    result = aggregate(SLOTS, _with_memory(lab_links(), memory))
    assert {h.host: h.memory.usable for h in result.hosts} == {"w1": 8 * gib, "w2": 12 * gib, "p": 2 * gib}
    assert result.host_loads(workers=2, ps=1) == (HostLoad(1, 0, 8 * gib, "w1"), HostLoad(1, 0, 12 * gib, "w2"),
                                                  HostLoad(0, 1, 2 * gib, "p"))
    two = parse_hosts("a:2,b:1")  # two workers share a's memory
    links = _with_memory([link("a", "b", 1000), link("b", "a", 1000)],
                         {"a": HostMemory(None, 8 * gib), "b": HostMemory(None, 3 * gib)})
    loads = aggregate(two, links).host_loads(workers=2, ps=1)
    assert loads == (HostLoad(2, 0, 8 * gib, "a"), HostLoad(0, 1, 3 * gib, "b"))
    check = check_memory(ModelMemory.from_counts(200_000_000, 4, "sgd"), 1, probed=True, hosts=loads)
    assert check.worker_fits("allreduce") is False and check.worker_fits("parameter_server") is True
    assert check.refusal("horovod") == (
        "every worker holds the whole model: 5.45 GiB (variables, sgd slots and gradients 2.24 GiB + working "
        "space 2.98 GiB + runtime 238 MiB); 2 workers on one host need 10.9 GiB, above the probed 8 GiB of host a")
    assert (check.ps_memory, check.worker_memory, check.ps_room) == (3 * gib, 8 * gib, 3 * gib)
    assert {h.memory for h in aggregate(SLOTS, lab_links()).host_loads(2, 1)} == {None}  # no memory reported
    assert result.as_dict()["hosts"]["p"]["memory"]["limit"] == 2 * gib


def test_probed_memory_decides_and_the_block_shows_it(monkeypatch):
    """A 128M-parameter table listed by the probe, the ps host capped at 2 GiB by its cgroup: one ps
    does not fit, the text says so with the numbers, and the JSON has min_ps."""
    from tfdist.probe import driver as probe
    from tfdist.probe.host_memory import HostMemory

    gib = 2**30
    memory = {"w1": HostMemory(None, 16 * gib), "w2": HostMemory(None, 16 * gib),
              "p": HostMemory(16 * gib, 15 * gib, limit=2 * gib, source="/sys/fs/cgroup/lab/memory.max")}

    def fake(hosts, workers, ps, model=None, batch_size=None, **kwargs):
        return aggregate(parse_hosts(hosts), _with_memory(lab_links(), memory), steps={"w1": 20.0, "w2": 80.0},
                         params=128_000_129, dtype_bytes=4, batch_size=64,  # the 512 MB variable flat: no
                         variables=[((128_000_000,), 4), ((128, 1), 4), ((1,), 4)])  # matrix worth PowerSGD

    monkeypatch.setattr(probe, "probe_hosts", fake)
    result = run(*PROBE, "--model", "m:f", "--optimizer", "adagrad")
    assert result.exit_code == 0, result.output
    assert "  p: link 50 Mbit/s" not in result.output and "memory 2 GiB (cgroup limit)" in result.output
    assert "Memory: 488 MiB of variables (3 variables listed from the model)" in result.output
    words = " ".join(result.output.split())
    assert "- parameter_server would be faster but does not fit: with 1 ps and shards=1 the fullest ps needs " \
           "3.09 GiB" in words and "above the probed 2 GiB per ps; --ps 2 with shards=2 is the fewest" in words
    data = json.loads(run(*PROBE, "--model", "m:f", "--optimizer", "adagrad", "--json").output)
    assert (data["min_ps"], data["min_ps_shards"], data["memory"]["probed"]) == (2, 2, True)
    assert data["recommended"] != "parameter_server"
    text = usage_error(run(*PROBE, "--model", "m:f", "--optimizer", "adam", "--largest-variable", "1M"))
    assert "--probe with --model measures --largest-variable itself" in text


def test_nothing_fits_in_the_probed_memory_names_the_hosts_not_the_refused_options(monkeypatch):
    """Under --probe --ps-memory and --worker-memory are refused, so a plan that fits nowhere names the
    probed hosts (--hosts), with the numbers and the fix."""
    from tfdist.probe import driver as probe
    from tfdist.probe.host_memory import HostMemory

    gib = 2**30
    memory = {host: HostMemory(None, 3 * gib // 2) for host in ("w1", "w2", "p")}

    def fake(hosts, workers, ps, model=None, batch_size=None, **kwargs):
        return aggregate(parse_hosts(hosts), _with_memory(lab_links(), memory), steps={"w1": 20.0, "w2": 80.0},
                         params=128_000_000, dtype_bytes=4, batch_size=64, variables=[((1_000_000, 128), 4)])

    monkeypatch.setattr(probe, "probe_hosts", fake)
    text = usage_error(run(*PROBE, "--model", "m:f", "--optimizer", "adagrad"))
    assert text.startswith("Error: Invalid value for '--hosts': no backend fits in the probed hosts' memory: ")
    assert "--ps-memory" not in text and "--worker-memory" not in text
    assert "every worker holds the whole model: 3.57 GiB, above the probed 1.5 GiB of host w" in text
    assert "the fullest ps needs 3.09 GiB, above the probed 1.5 GiB per ps; --ps 3 with shards=3" in text
    assert text.rstrip().endswith("; fix: give the probed hosts more memory, or more ps tasks as said")
