"""``tfdist advise --probe``: measure the links, the compute and the model on the hosts of ``--hosts``.

The hosts and the placement are exactly those of ``tfdist launch --hosts`` (``parse_hosts`` and
``place_tasks``: the chief takes no slot, ps tasks on the last hosts, workers in the other slots),
so the advice describes the cluster launch would start. ``probe_hosts`` measures:

1. **links**, one pair at a time, in ring order over the hosts that get a worker or ps task
   (h1->h2, h2->h3, ..., hn->h1, then the ring backwards; two hosts: a->b and b->a): a receiver
   agent on the destination, a sender agent on the source (one-byte ping-pongs for the latency,
   then a transfer of ``seconds``). A host's rate is the smaller of the fastest it sent and the
   fastest it received (see :func:`aggregate`);
2. **compute** (with ``model``): every worker host's agent starts at once (importing TensorFlow,
   building the model and its warm-up steps overlap), then one host at a time times its training
   step at ``batch_size`` (:func:`measure_compute`); also the parameter count and bytes per parameter.

Agents (:mod:`tfdist.advise.probe_agent`) run over ssh like ``tfdist launch --hosts`` tasks (a host
that is this machine without ssh), with the launcher's Python, working directory and environment.
Before anything is measured every host is checked at once (``run_preflight``): an unreachable host
is one :class:`ProbeError` naming each failed host and the fix.

The aggregation (:class:`ProbeResult`, :func:`aggregate`) is pure:

    result = probe_hosts("h1:1,h2:1,h3:1", workers=2, ps=1, model="models:build", batch_size=64)
    advice = advise(result.to_cluster(2, 1), result.to_workload(64))
"""
from __future__ import annotations

import dataclasses
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfdist.advise.cluster import Cluster, Embedding, Workload
from tfdist.advise.errors import AdviseError
from tfdist.advise.host_memory import HostMemory
from tfdist.advise.memory import HostLoad
from tfdist.errors import with_fix
from tfdist.launch.hosts import HostSlots, Placement, check_reachable_names, parse_hosts, place_tasks

AGENT = "tfdist.advise.probe_agent"
DEFAULT_SECONDS = 1.5  # s of bulk transfer per link
SKIP_SECONDS = 0.2  # s of each transfer left out of the rate (a token bucket's burst)
PINGS = 20
COMPUTE_STEPS = 3  # per timed window (three windows)
COMPUTE_MIN_SECONDS = 0.5  # per timed window: several cgroup CPU periods (100 ms)
COMPUTE_TIMEOUT = 600.0  # s: every host ready (TensorFlow imported, the model built, warm) on loaded hosts
TIMING_TIMEOUT = 300.0  # s: one host's timed windows, once it was told to go
LINK_SLACK = 60.0  # s beyond the transfer an agent of a link may take (ssh, connect, ping)


class ProbeError(AdviseError):
    """A host the probe could not measure; the message names each failed host and the fix."""

    def __init__(self, message: str, field: str = "hosts") -> None:
        super().__init__(message, field)


@dataclasses.dataclass(frozen=True)
class LinkMeasure:
    """One measured direction: ``source`` sent to ``target`` at ``rate_bps`` (bits/s, measured by the
    receiver); ``latency_s`` is half the median round trip of one-byte pings; ``target_memory`` the
    receiving host's memory as the receiver read it."""

    source: str
    target: str
    rate_bps: float
    latency_s: float
    target_memory: HostMemory | None = None


@dataclasses.dataclass(frozen=True)
class HostMeasure:
    """One host's figures: its link rate (bits/s, min of sent and received), the median latency of
    its links, its step time (ms, None when not measured), its speed (fastest step / its step) and its
    memory (None when the receiver reported none)."""

    host: str
    rate_bps: float
    latency_s: float
    step_ms: float | None = None
    speed: float = 1.0
    memory: HostMemory | None = None


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What the probe measured, per host in ``--hosts`` order, and the model (None without ``--model``;
    ``variables``: each variable's shape and dtype bytes; ``embeddings``: its ``Embedding`` layers)."""

    slots: tuple[HostSlots, ...]
    hosts: tuple[HostMeasure, ...]
    links: tuple[LinkMeasure, ...] = ()
    params: int | None = None
    dtype_bytes: int | None = None
    batch_size: int | None = None
    variables: tuple[tuple[tuple[int, ...], int], ...] | None = None
    embeddings: tuple[Embedding, ...] = ()

    def host(self, name: str) -> HostMeasure:
        return next(h for h in self.hosts if h.host == name)

    @property
    def latency_s(self) -> float:
        """The median one-way latency over the measured links."""
        return statistics.median(link.latency_s for link in self.links) if self.links else \
            statistics.median(h.latency_s for h in self.hosts)

    @property
    def step_ms(self) -> float | None:
        """The fastest host's step time (speed 1), or None without ``--model``."""
        steps = [h.step_ms for h in self.hosts if h.step_ms is not None]
        return min(steps) if steps else None

    def to_cluster(self, workers: int, ps: int) -> Cluster:
        """The advisor's :class:`Cluster` for ``workers`` and ``ps`` placed as ``tfdist launch`` would.

        Worker hosts in placement order, each with its measured rate (hosts with as many workers each
        share ``workers_per_host``; with uneven slots every worker gets its host's rate divided by its
        workers there); speeds from the measured step times (1 without a model); ``ps_bandwidth`` the
        slowest ps host; ``colocated`` when a ps shares a host with a worker; the median latency.
        """
        placements = place_tasks(self.slots, workers, ps)
        worker_hosts = [p.host for p in placements if p.task_type == "worker"]
        ps_hosts = [p.host for p in placements if p.task_type == "ps"]
        order = list(dict.fromkeys(worker_hosts))
        per_host = {h: worker_hosts.count(h) for h in order}
        missing = [h for h in order + ps_hosts if h not in {m.host for m in self.hosts}]
        if missing:
            raise ProbeError(with_fix(f"no measurement for host(s) {', '.join(dict.fromkeys(missing))}",
                                      "probe with the same --hosts, --workers and --ps"))
        if len(set(per_host.values())) == 1:
            group = next(iter(per_host.values()))
            bandwidths = tuple(self.host(h).rate_bps / 8 for h in order)
        else:  # uneven slots: one "host" per worker, sharing its host's link
            group = 1
            bandwidths = tuple(self.host(h).rate_bps / 8 / per_host[h] for h in worker_hosts)
        speeds = tuple(self.host(h).speed for h in worker_hosts)
        ps_bandwidth = min((self.host(h).rate_bps / 8 for h in ps_hosts), default=None)
        placement = "colocated" if set(ps_hosts) & set(worker_hosts) else "separate"
        return Cluster(workers=workers, bandwidths=bandwidths, speeds=speeds, workers_per_host=group, ps=ps,
                       ps_placement=placement, ps_bandwidth=ps_bandwidth, latency_s=self.latency_s)

    def host_loads(self, workers: int, ps: int) -> tuple[HostLoad, ...]:
        """Every host given a worker or a ps task as ``tfdist launch`` places them, with its tasks and
        usable memory (:class:`HostMemory`; None when it reported none): what the memory check weighs."""
        from collections import Counter

        placements = [p for p in place_tasks(self.slots, workers, ps) if p.task_type in ("worker", "ps")]
        known = {h.host: h.memory.usable for h in self.hosts if h.memory is not None}
        tasks = Counter((p.host, p.task_type) for p in placements)
        return tuple(HostLoad(tasks[host, "worker"], tasks[host, "ps"], known.get(host), name=host)
                     for host in dict.fromkeys(p.host for p in placements))

    def to_workload(self, batch_size: int, step_ms: float | None = None, params: int | None = None,
                    dtype_bytes: int | None = None, overlap: float = 0.0) -> Workload:
        """The advisor's :class:`Workload`: the measured step time of the fastest host, params and
        dtype bytes, unless given (without ``--model`` they must be)."""
        step_ms = step_ms if step_ms is not None else self.step_ms
        params = params if params is not None else self.params
        dtype_bytes = dtype_bytes if dtype_bytes is not None else (self.dtype_bytes or 4)
        for value, flag in ((step_ms, "--step-ms"), (params, "--params")):
            if value is None:
                raise AdviseError(with_fix(f"the probe measured no model, so {flag} is unknown",
                                           f"give {flag}, or --model module:build_fn to measure it"),
                                  flag.strip("-").replace("-", "_"))
        return Workload(params=params, batch_size=batch_size, step_ms=step_ms, dtype_bytes=dtype_bytes,
                        overlap=overlap, embeddings=self.embeddings)

    def as_dict(self) -> dict[str, Any]:
        """The ``"measured"`` object of ``--json``."""
        return {"hosts": {h.host: {"rate_bps": h.rate_bps, "latency_ms": h.latency_s * 1000,
                                   "step_ms": h.step_ms, "speed": h.speed,
                                   "memory": h.memory.as_dict() if h.memory else None} for h in self.hosts},
                "links": [{"from": link.source, "to": link.target, "rate_bps": link.rate_bps,
                           "latency_ms": link.latency_s * 1000} for link in self.links],
                "latency_ms": self.latency_s * 1000, "params": self.params, "dtype_bytes": self.dtype_bytes,
                "batch_size": self.batch_size, "step_ms": self.step_ms,
                "embeddings": [table.as_dict() for table in self.embeddings]}


def ring(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """The directions to measure, one at a time: each host to the next and the last to the first,
    then (three hosts or more) the same ring backwards; two hosts: a->b and b->a. So every host
    sends to and receives from each of its two ring neighbours."""
    if len(hosts) < 2:
        raise ProbeError(with_fix(f"the probe needs two hosts or more with tasks, got {list(hosts)}",
                                  "list the cluster's hosts in --hosts (on one machine there is no link to "
                                  "measure: give --bandwidth instead of --probe)"))
    forward = [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))]
    if len(hosts) == 2:
        return forward
    return forward + [(target, source) for source, target in forward]


def measured_hosts(slots: Sequence[HostSlots], workers: int, ps: int) -> tuple[list[str], list[str]]:
    """``(hosts with a worker or ps task, hosts with a worker)``, both in ``--hosts`` order."""
    placements = place_tasks(slots, workers, ps)
    busy = {p.host for p in placements if p.task_type in ("worker", "ps")}
    working = {p.host for p in placements if p.task_type == "worker"}
    return [s.host for s in slots if s.host in busy], [s.host for s in slots if s.host in working]


def aggregate(slots: Sequence[HostSlots], links: Sequence[LinkMeasure],
              steps: Mapping[str, float] | None = None, params: int | None = None,
              dtype_bytes: int | None = None, batch_size: int | None = None,
              variables: Sequence[tuple[Sequence[int], int]] | None = None,
              embeddings: Sequence[Sequence[float]] = ()) -> ProbeResult:
    """Per-host figures from link measurements and step times. Pure.

    A transfer a->b runs at the slower of a's sending and b's receiving, so one slow host slows
    both its neighbours' measurements. A host's send rate is therefore the fastest it sent to any
    neighbour, its receive rate the fastest it received from any, and its rate the smaller of the
    two (a link shaped one way only shows). Its latency is the median over its links, its speed the
    fastest step time over its own (1 when not measured)."""
    steps = dict(steps or {})
    fastest = min(steps.values()) if steps else None
    names = [s.host for s in slots]
    measures = []
    for host in names:
        mine = [link for link in links if host in (link.source, link.target)]
        if not mine:
            continue
        sent = [link.rate_bps for link in mine if link.source == host]
        received = [link.rate_bps for link in mine if link.target == host]
        rate = min(max(sent or received), max(received or sent))
        latency = statistics.median(link.latency_s for link in mine)
        step = steps.get(host)
        speed = fastest / step if step and fastest else 1.0
        memory = next((link.target_memory for link in mine if link.target == host and link.target_memory), None)
        measures.append(HostMeasure(host, rate, latency, step, speed, memory))
    listed = None if variables is None else tuple((tuple(int(d) for d in shape), int(size))
                                                  for shape, size in variables)
    tables = tuple(Embedding(int(rows), int(dim), float(lookups)) for rows, dim, lookups in embeddings)
    return ProbeResult(tuple(slots), tuple(measures), tuple(links), params, dtype_bytes, batch_size, listed, tables)


# --- running agents -------------------------------------------------------------------------------
class Agent:
    """One ``probe_agent`` process on ``host``: its spec on stdin (kept open: EOF stops it), its
    answers read from stdout line by line."""

    def __init__(self, argv: Sequence[str], spec: Mapping[str, Any], host: str) -> None:
        self.host = host
        self.process = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self._stderr.extend(self.process.stderr), daemon=True).start()
        try:
            self.process.stdin.write(json.dumps(dict(spec)) + "\n")
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
        from tfdist.advise.probe_agent import parse_answer

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
        from tfdist.launch.remote import describe_failure

        time.sleep(0.1)
        return describe_failure(self.host, self.process.returncode, "".join(self._stderr), sys.executable)

    def go(self) -> None:
        """Let a ready compute agent time its steps (a ``go`` line on its stdin)."""
        from tfdist.advise.probe_agent import GO

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
        """End stdin (the agent leaves), then kill it if it lingers."""
        self.end_input()
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def agent_argv(host: str, local: bool, options: Any) -> list[str]:
    """``python -m tfdist.advise.probe_agent``, over ssh unless ``local``."""
    from tfdist.launch.remote import ssh_command

    remote = [sys.executable, "-m", AGENT]
    return remote if local else ssh_command(host, remote, options)


def measure_link(source: str, target: str, seconds: float,
                 start: Callable[[str, dict], Agent]) -> LinkMeasure:
    """One direction: a receiver on ``target``, a sender on ``source``; both stopped afterwards."""
    timeout = seconds + LINK_SLACK
    agents = []
    try:
        receiver = start(target, {"role": "receive", "host": target, "seconds": seconds, "skip": SKIP_SECONDS,
                                  "timeout": timeout})
        agents.append(receiver)
        port = receiver.answer(timeout)["port"]
        sender = start(source, {"role": "send", "peer": target, "port": port, "seconds": seconds,
                                "pings": PINGS, "timeout": timeout})
        agents.append(sender)
        sent = sender.answer(timeout)
        received = receiver.answer(timeout)
    finally:
        for agent in agents:
            agent.close()
    return LinkMeasure(source, target, float(received["rate_bps"]), float(sent["latency_s"]),
                       HostMemory.from_dict(received.get("memory")))


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
    from tfdist.launch.plan import LaunchError
    from tfdist.launch.remote import SshOptions, forwarded_env, is_local_host, run_preflight

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

    links = []
    for source, target in pairs:
        log(f"probing the link {source} -> {target} ({seconds:g} s)")
        links.append(measure_link(source, target, seconds, start))
    steps: dict[str, float] = {}
    params = dtype_bytes = variables = None
    embeddings: list = []
    if model is not None:
        spec = {"role": "compute", "model": model, "batch_size": batch_size, "cwd": cwd,
                "env": forwarded_env(environ), "steps": COMPUTE_STEPS, "min_seconds": COMPUTE_MIN_SECONDS}
        log(f"starting the compute agents on {', '.join(working)} at once (TensorFlow, {model}, warm-up)")
        for host, found in measure_compute(working, spec, start, log).items():
            steps[host] = float(found["step_ms"])
            params, dtype_bytes = int(found["params"]), int(found["dtype_bytes"])
            variables = found.get("variables")
            embeddings = found.get("embeddings") or []
    return aggregate(slots, links, steps, params, dtype_bytes, batch_size, variables, embeddings)


def time_step_here(model: str, batch_size: int, environ: Mapping[str, str] | None = None,
                   cwd: str | None = None, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """``model``'s training step at ``batch_size`` on this machine, timed as ``probe_hosts`` times a
    worker host (one compute agent, no ssh, started from ``cwd`` with ``environ``): its answer,
    ``step_ms``, ``params``, ``dtype_bytes``, ``embeddings``, .... Raises :class:`ProbeError`.

        time_step_here("models:build_model", 64)["step_ms"]   # what `tfdist advise --step-ms` takes
    """
    from tfdist.launch.remote import forwarded_env

    environ = os.environ if environ is None else environ
    spec = {"role": "compute", "model": model, "batch_size": batch_size, "cwd": cwd or os.getcwd(),
            "env": forwarded_env(environ), "steps": COMPUTE_STEPS, "min_seconds": COMPUTE_MIN_SECONDS}
    here = "this machine"
    log(f"starting the compute agent on {here} (TensorFlow, {model}, warm-up)")
    found = measure_compute([here], spec, lambda host, spec: Agent(agent_argv(host, True, None), spec, host), log)
    return found[here]


def default_workers(slots: Sequence[HostSlots], ps: int) -> int:
    """``--workers`` by default: the slots left after the ps tasks (at least 1)."""
    workers = sum(s.slots for s in slots) - ps
    if workers < 1:
        raise ProbeError(with_fix(f"--hosts gives {sum(s.slots for s in slots)} slot(s), none left for a "
                                  f"worker after {ps} ps", "add slots to --hosts, or ask for fewer --ps"),
                         "workers")
    return workers


__all__ = ["HostMeasure", "LinkMeasure", "Placement", "ProbeError", "ProbeResult", "aggregate",
           "default_workers", "measure_compute", "measure_link", "measured_hosts", "probe_hosts", "ring",
           "time_step_here"]
