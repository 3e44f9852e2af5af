"""The probe's driver: measure the links, the compute and the model on the hosts of ``--hosts``.

What ``tfdist advise --probe`` and ``tfdist launch --backend auto`` (:mod:`tfdist.auto`) run. The
hosts and the placement are exactly those of ``tfdist launch --hosts`` (``parse_hosts`` and
``place_tasks``: the chief takes no slot, ps tasks on the last hosts, workers in the other slots),
so the advice describes the cluster launch would start. ``probe_hosts`` measures:

1. **links**, in ring order over the hosts that get a worker or ps task (h1->h2, h2->h3, ...,
   hn->h1, then the ring backwards; two hosts: a->b and b->a): per direction a receiver agent on
   the destination and a sender agent on the source, every agent started at once; each sender
   times one-byte ping-pongs for the latency, then the transfers run one direction at a time, each
   until its rate is steady and ``seconds`` at most (:func:`measure_links`). A host's rate is the smaller of the fastest it sent and the
   fastest it received (see :func:`tfdist.probe.result.aggregate`);
2. **compute** (with ``model``): every worker host's agent starts at once (importing TensorFlow,
   building the model and its warm-up steps overlap), then one host at a time times its training
   step at ``batch_size`` (:func:`measure_compute`); also the parameter count and bytes per parameter.

Agents (:mod:`tfdist.probe.agent`, spoken to in :mod:`tfdist.probe.wire`) run over ssh like ``tfdist
launch --hosts`` tasks (a host that is this machine without ssh), with the launcher's Python,
working directory and environment. Each starts as a process group of its own with the parent-death
signal (:func:`tfdist.launch.processes.start_group`), and one that lingers after its stdin ended is
stopped with its group (:func:`tfdist.launch.processes.stop_group`), so an interrupted probe leaves
nothing behind. Before anything is measured every host is checked at once (``run_preflight``): an
unreachable host is one :class:`ProbeError` naming each failed host and the fix.

May import :mod:`tfdist.launch` (hosts, processes, the ssh runner), :mod:`tfdist.advise`'s errors and
the rest of :mod:`tfdist.probe`. What it measured is :mod:`tfdist.probe.result`'s (pure):

    found = probe_hosts("h1:1,h2:1,h3:1", workers=2, ps=1, model="models:build", batch_size=64)
    advice = advise(*build_inputs(found, workers=2, ps=1, batch_size=64)[:2])
"""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfdist.errors import with_fix
from tfdist.launch.errors import LaunchError
from tfdist.launch.hosts import check_reachable_names, parse_hosts
from tfdist.launch.processes import start_group, stop_group
from tfdist.launch.remote import SshOptions, describe_failure, forwarded_env, is_local_host, run_preflight, \
    ssh_command
from tfdist.probe.host_memory import HostMemory
from tfdist.probe.result import (HostMeasure, LinkMeasure, ProbeError, ProbeResult, aggregate, build_inputs,
                                 default_workers, measured_hosts, render_measured, ring)
from tfdist.probe.wire import GO, encode_spec, parse_answer

AGENT = "tfdist.probe.agent"
DEFAULT_SECONDS = 1.5  # s of bulk transfer per link at most (a steady rate ends it sooner)
SKIP_SECONDS = 0.2  # s of each transfer left out of the rate (a token bucket's burst)
PINGS = 20
COMPUTE_STEPS = 3  # per timed window (three windows)
COMPUTE_MIN_SECONDS = 0.5  # per timed window: several cgroup CPU periods (100 ms)
COMPUTE_TIMEOUT = 600.0  # s: every host ready (TensorFlow imported, the model built, warm) on loaded hosts
TIMING_TIMEOUT = 300.0  # s: one host's timed windows, once it was told to go
LINK_SLACK = 60.0  # s beyond the transfer an agent of a link may take (ssh, connect, ping)
STOP_GRACE = 1.0  # s between SIGTERM and SIGKILL for an agent's group that outlived its stdin and wait


class Agent:
    """One agent process (``tfdist.probe.agent``) on ``host``: its spec on stdin (kept open: EOF stops it), its
    answers read from stdout line by line."""

    def __init__(self, argv: Sequence[str], spec: Mapping[str, Any], host: str) -> None:
        self.host = host
        self.process = start_group(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self._stderr.extend(self.process.stderr), daemon=True).start()
        try:
            self.process.stdin.write(encode_spec(spec))
            self.process.stdin.flush()
        except OSError:
            pass  # it died at once: answer() reports why

    def _pump(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def answer(self, timeout: float, waiting: str = "answer") -> dict[str, Any]:
        """The next ``TFDIST_PROBE`` answer's ``result``/port; ``ProbeError`` naming the host otherwise
        (``waiting``: what it did not do in time, for the message)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(0.0, left))
            except queue.Empty:
                raise ProbeError(with_fix(f"{self.host} did not {waiting} within {timeout:.0f} s",
                                          f"check that `ssh {self.host} true` returns at once and the "
                                          "host is not overloaded")) from None
            if line is None:
                self.process.wait(timeout=10)
                raise ProbeError(self._failure())
            found = parse_answer(line)
            if found is None:
                continue
            if found.get("error"):
                raise ProbeError(f"{self.host}: {found['error']}")
            return found.get("result", found)

    def _failure(self) -> str:
        time.sleep(0.1)
        return describe_failure(self.host, self.process.returncode, "".join(self._stderr), sys.executable)

    def go(self) -> None:
        """Let a ready compute agent time its steps (a ``go`` line on its stdin)."""
        try:
            self.process.stdin.write(GO.decode() + "\n")
            self.process.stdin.flush()
        except OSError:
            pass  # it died: answer() reports why

    def end_input(self) -> None:
        """End stdin: the agent leaves (see :meth:`close`)."""
        try:
            self.process.stdin.close()
        except OSError:
            pass

    def close(self, grace: float = 5.0) -> None:
        """End stdin (the agent leaves), then stop its process group if it lingers ``grace`` s on."""
        self.end_input()
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            stop_group(self.process, STOP_GRACE)


def agent_argv(host: str, local: bool, options: Any) -> list[str]:
    """``python -m tfdist.probe.agent``, over ssh unless ``local``."""
    remote = [sys.executable, "-m", AGENT]
    return remote if local else ssh_command(host, remote, options)


def measure_link(source: str, target: str, seconds: float,
                 start: Callable[[str, dict], Agent]) -> LinkMeasure:
    """One direction: a receiver on ``target``, a sender on ``source``; both stopped afterwards."""
    return measure_links([(source, target)], seconds, start)[0]


def measure_links(pairs: Sequence[tuple[str, str]], seconds: float,
                  start: Callable[[str, dict], Agent]) -> list[LinkMeasure]:
    """Every direction of ``pairs``: all agents start at once (each sender as soon as its receiver
    listens) and ping at once, then the transfers run one at a time, each sender told ``go`` once the
    one before has ended. A transfer runs ``seconds`` at most: its receiver ends it once the rate is
    steady (:func:`tfdist.probe.agent.steady`). Starting the agents is most of a probe's time; a transfer has the hosts'
    links and CPUs to itself (three at once on the lab's two cores read unlimited links 3-10x slower,
    and the parameter servers' predictions with them). Every agent is stopped afterwards, on every path."""
    timeout = len(pairs) * seconds + LINK_SLACK  # a receiver waits for every transfer before its own
    agents: list[Agent] = []
    try:
        receivers = []
        for _, target in pairs:
            receivers.append(start(target, {"role": "receive", "host": target, "seconds": seconds,
                                            "skip": SKIP_SECONDS, "timeout": timeout, "steady": True,
                                            "pythonpath": task_pythonpath()}))
            agents.append(receivers[-1])
        senders = []
        for (source, target), receiver in zip(pairs, receivers):
            port = receiver.answer(timeout)["port"]
            senders.append(start(source, {"role": "send", "peer": target, "port": port, "seconds": seconds,
                                          "pings": PINGS, "timeout": timeout, "gated": True}))
            agents.append(senders[-1])
        for sender in senders:  # every sender has pinged: no ping waits behind a transfer
            if sender.answer(timeout, "ping its peer").get("ready") is not True:
                raise ProbeError(with_fix(f"{sender.host} sent before it was told to",
                                          "use the same tfdist version on every host"))
        measured = []
        for (source, target), sender, receiver in zip(pairs, senders, receivers):
            sender.go()
            sent, received = sender.answer(timeout), receiver.answer(timeout)
            measured.append(LinkMeasure(source, target, float(received["rate_bps"]), float(sent["latency_s"]),
                                        HostMemory.from_dict(received.get("memory")),
                                        _flag(received.get("horovod"))))
    finally:
        _close_all(agents)
    return measured


def task_pythonpath(environ: Mapping[str, str] | None = None, cwd: str | None = None) -> list[str]:
    """The launcher's ``PYTHONPATH`` as the tasks will search it: every entry made absolute against the
    launcher's working directory, where every task runs."""
    value = (os.environ if environ is None else environ).get("PYTHONPATH", "")
    return [os.path.join(cwd or os.getcwd(), entry) for entry in value.split(os.pathsep) if entry]


def _flag(value: Any) -> bool | None:
    """A receiver's yes or no; anything else (an older agent's silence) is None."""
    return value if isinstance(value, bool) else None


def _close_all(agents: Sequence[Agent]) -> None:
    """End every agent's stdin first (they all leave at once), then wait for (or kill) each."""
    for agent in agents:
        agent.end_input()
    for agent in agents:
        agent.close()


def _await_ready(agents: Mapping[str, Agent], timeout: float) -> None:
    """Return once every agent said it is ready; the first to fail (an error, an exit, not ready within
    ``timeout`` s of now) raises its :class:`ProbeError` at once, naming its host."""
    done: queue.Queue[tuple[str, ProbeError | None]] = queue.Queue()
    waiting = "get ready (import TensorFlow, build the model, train its warm-up steps)"

    def wait(host: str, agent: Agent) -> None:
        try:
            found = agent.answer(timeout, waiting)
            if found.get("ready") is not True:
                raise ProbeError(with_fix(f"{host} answered {found!r} instead of getting ready",
                                          "use the same tfdist version on every host"))
            done.put((host, None))
        except ProbeError as exc:
            done.put((host, exc))
        except Exception as exc:  # noqa: BLE001  (never leave the prober waiting on a dead thread)
            done.put((host, ProbeError(with_fix(f"{host}: {type(exc).__name__}: {exc}",
                                                "run the probe again; report it if it persists"))))

    for host, agent in agents.items():
        threading.Thread(target=wait, args=(host, agent), name=f"tfdist-probe-{host}", daemon=True).start()
    pending = set(agents)
    deadline = time.monotonic() + timeout + 30  # each waiter answers within timeout (+ a dead agent's wait)
    while pending:
        try:
            host, error = done.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            late = ", ".join(sorted(pending))
            raise ProbeError(with_fix(f"{late} did not get ready within {timeout:.0f} s",
                                      "check that the hosts are not overloaded")) from None
        if error is not None:
            raise error
        pending.discard(host)


def measure_compute(hosts: Sequence[str], spec: Mapping[str, Any], start: Callable[[str, dict], Agent],
                    log: Callable[[str], None] = lambda message: None, ready_timeout: float = COMPUTE_TIMEOUT,
                    timing_timeout: float = TIMING_TIMEOUT) -> dict[str, dict[str, Any]]:
    """Each host's compute answer (``step_ms``, ``params``, ...) for the ``compute`` ``spec``.

    Every host's agent starts at once and says when it is ready (TensorFlow imported, the model built,
    its warm-up steps done) within ``ready_timeout`` s; then one host at a time, in ``hosts`` order, is
    told to go and answers within ``timing_timeout`` s, so no two hosts time their steps at once (the
    measurement a serial probe made) while the start-ups overlap. A host that fails, or is not ready in
    time, raises :class:`ProbeError` naming it at once; every agent started is closed on every path.
    The agents' hard timeout covers the start-up and every host's turn."""
    spec = dict(spec, timeout=ready_timeout + timing_timeout * len(hosts))
    agents: dict[str, Agent] = {}
    found: dict[str, dict[str, Any]] = {}
    try:
        for host in hosts:
            agents[host] = start(host, spec)
        _await_ready(agents, ready_timeout)
        for host in hosts:
            log(f"timing {spec['model']} on {host} (batch {spec['batch_size']})")
            agents[host].go()
            answer = agents[host].answer(timing_timeout, "time its steps")
            missing = [key for key in ("step_ms", "params", "dtype_bytes") if key not in answer]
            if missing:
                raise ProbeError(with_fix(f"{host} answered without {', '.join(missing)}",
                                          "use the same tfdist version on every host"))
            found[host] = answer
            agents[host].close()  # done: it leaves now, not at the end
    finally:
        _close_all(list(agents.values()))
    return found


def probe_hosts(hosts: str, workers: int | None = None, ps: int = 0, model: str | None = None,
                batch_size: int | None = None, options: Any = None, seconds: float = DEFAULT_SECONDS,
                environ: Mapping[str, str] | None = None, cwd: str | None = None,
                log: Callable[[str], None] = lambda message: None) -> ProbeResult:
    """Measure ``hosts`` (``--hosts`` syntax) for ``workers`` (default: the slots left after the ps)
    and ``ps`` placed as ``tfdist launch`` would; with ``model`` also each worker host's step time
    at ``batch_size``. Raises :class:`ProbeError` naming each failed host and the fix."""
    if model is not None and batch_size is None:
        raise ProbeError(with_fix("--model needs --batch-size", "add e.g. --batch-size 64"), "batch_size")
    options = options or SshOptions()
    environ = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    try:
        slots = parse_hosts(hosts)
        check_reachable_names(slots)
        workers = default_workers(slots, ps) if workers is None else workers
        busy, working = measured_hosts(slots, workers, ps)
        pairs = ring(busy)
        local = {host for host in busy if is_local_host(host)}
        log(f"probing {', '.join(busy)}: checking the hosts")
        run_preflight({host: 1 for host in busy}, options, shim=False, local_hosts=local, cwd=cwd)
    except LaunchError as exc:
        message = str(exc).replace("cannot start the job, nothing was started", "cannot probe the hosts")
        raise ProbeError(message) from None

    def start(host: str, spec: dict) -> Agent:
        return Agent(agent_argv(host, host in local, options), spec, host)

    log(f"probing the links {', '.join(f'{source} -> {target}' for source, target in pairs)} "
        f"({seconds:g} s each, one at a time)")
    links = measure_links(pairs, seconds, start)
    steps: dict[str, float] = {}
    params = dtype_bytes = variables = None
    embeddings: list = []
    powersgd_rates: dict[str, float] = {}
    if model is not None:
        spec = {"role": "compute", "model": model, "batch_size": batch_size, "cwd": cwd,
                "env": forwarded_env(environ), "steps": COMPUTE_STEPS, "min_seconds": COMPUTE_MIN_SECONDS}
        log(f"starting the compute agents on {', '.join(working)} at once (TensorFlow, {model}, warm-up)")
        for host, found in measure_compute(working, spec, start, log).items():
            steps[host] = float(found["step_ms"])
            params, dtype_bytes = int(found["params"]), int(found["dtype_bytes"])
            variables = found.get("variables")
            embeddings = found.get("embeddings") or []
            if isinstance(found.get("powersgd_bytes_per_s"), (int, float)):
                powersgd_rates[host] = float(found["powersgd_bytes_per_s"])
    fastest = min(steps, key=steps.get) if steps else None  # PowerSGD's work, on the host of speed 1
    return aggregate(slots, links, steps, params, dtype_bytes, batch_size, variables, embeddings,
                     powersgd_rates.get(fastest) if fastest is not None else None)


def time_step_here(model: str, batch_size: int, environ: Mapping[str, str] | None = None,
                   cwd: str | None = None, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """``model``'s training step at ``batch_size`` on this machine, timed as ``probe_hosts`` times a
    worker host (one compute agent, no ssh, started from ``cwd`` with ``environ``): its answer,
    ``step_ms``, ``params``, ``dtype_bytes``, ``embeddings``, .... Raises :class:`ProbeError`.

        time_step_here("models:build_model", 64)["step_ms"]   # what `tfdist advise --step-ms` takes
    """
    environ = os.environ if environ is None else environ
    spec = {"role": "compute", "model": model, "batch_size": batch_size, "cwd": cwd or os.getcwd(),
            "env": forwarded_env(environ), "steps": COMPUTE_STEPS, "min_seconds": COMPUTE_MIN_SECONDS}
    here = "this machine"
    log(f"starting the compute agent on {here} (TensorFlow, {model}, warm-up)")
    found = measure_compute([here], spec, lambda host, spec: Agent(agent_argv(host, True, None), spec, host), log)
    return found[here]


__all__ = ["DEFAULT_SECONDS", "Agent", "HostMeasure", "HostMemory", "LinkMeasure", "ProbeError", "ProbeResult",
           "aggregate", "agent_argv", "build_inputs", "default_workers", "measure_compute", "measure_link",
           "measure_links", "measured_hosts", "probe_hosts", "render_measured", "ring", "time_step_here"]
