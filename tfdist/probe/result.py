"""What the probe measured, and what it means to the advisor. Pure: no process, no socket, no ssh.

:func:`aggregate` turns link measurements and step times into per-host figures (:class:`ProbeResult`);
:meth:`ProbeResult.to_cluster` and :meth:`ProbeResult.to_workload` (and :func:`build_inputs`, which
adds what the user gave) are the cost model's :class:`~tfdist.advise.model_inputs.Cluster` and
:class:`~tfdist.advise.model_inputs.Workload`, for the tasks placed as ``tfdist launch --hosts`` places
them (:func:`tfdist.launch.hosts.place_tasks`); :func:`render_measured` is the "Measured:" block that
``tfdist advise --probe`` and ``tfdist launch --backend auto`` print.

May import :mod:`tfdist.advise` (its inputs, the memory model, units), :mod:`tfdist.launch.hosts`,
:mod:`tfdist.probe.host_memory` and :mod:`tfdist.errors`.

    found = aggregate(parse_hosts("a:1,b:1,c:1"), links, steps={"a": 10.0, "b": 40.0}, params=669_706)
    cluster, workload, found = build_inputs(found, workers=2, ps=1, batch_size=64)
    print(render_measured(found))
"""
from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from tfdist.advise.errors import AdviseError
from tfdist.advise.memory import HostLoad
from tfdist.advise.model_inputs import Cluster, Embedding, Workload, example_speeds
from tfdist.advise.units import format_memory, format_rate
from tfdist.errors import with_fix
from tfdist.launch.errors import LaunchError
from tfdist.launch.hosts import HostSlots, place_tasks
from tfdist.probe.host_memory import HostMemory
from tfdist.runtime.lowrank import matrix_shape

__all__ = ["HostMeasure", "LinkMeasure", "ProbeError", "ProbeResult", "aggregate", "build_inputs",
           "default_workers", "measured_hosts", "render_measured", "ring"]


class ProbeError(AdviseError):
    """A host the probe could not measure; the message names each failed host and the fix."""

    def __init__(self, message: str, field: str = "hosts") -> None:
        super().__init__(message, field)


@dataclasses.dataclass(frozen=True)
class LinkMeasure:
    """One measured direction: ``source`` sent to ``target`` at ``rate_bps`` (bits/s, measured by the
    receiver); ``latency_s`` is half the median round trip of one-byte pings; ``target_memory`` the
    receiving host's memory as the receiver read it; ``target_horovod`` whether Horovod's TensorFlow
    extension is installed there (None: the receiver did not say)."""

    source: str
    target: str
    rate_bps: float
    latency_s: float
    target_memory: HostMemory | None = None
    target_horovod: bool | None = None


@dataclasses.dataclass(frozen=True)
class HostMeasure:
    """One host's figures: its link rate (bits/s, min of sent and received), the median latency of
    its links, its step time (ms, None when not measured), its speed (fastest step / its step), its
    memory (None when the receiver reported none) and whether Horovod's TensorFlow extension is
    installed there (None: not reported)."""

    host: str
    rate_bps: float
    latency_s: float
    step_ms: float | None = None
    speed: float = 1.0
    memory: HostMemory | None = None
    horovod: bool | None = None


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
    #: PowerSGD's own work on the fastest host, in bytes of compressed matrix per second (None: not timed).
    powersgd_bytes_per_s: float | None = None

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
                        overlap=overlap, embeddings=self.embeddings,
                        matrices=self.matrices() if params == self.params else (),
                        powersgd_bytes_per_s=self.powersgd_bytes_per_s)

    def matrices(self) -> tuple[tuple[int, int], ...]:
        """The measured model's kernels as PowerSGD sees them (``tfdist.runtime.lowrank.matrix_shape``),
        its embedding tables left out (their gradients are sparse rows, allgathered whole)."""
        tables = Counter((e.rows, e.dim) for e in self.embeddings)
        found = []
        for shape, _ in self.variables or ():
            matrix = matrix_shape(shape)
            if matrix is None:
                continue
            if tables[matrix] > 0:
                tables[matrix] -= 1
                continue
            found.append(matrix)
        return tuple(found)

    def as_dict(self) -> dict[str, Any]:
        """The ``"measured"`` object of ``--json``."""
        return {"hosts": {h.host: {"rate_bps": h.rate_bps, "latency_ms": h.latency_s * 1000,
                                   "step_ms": h.step_ms, "speed": h.speed,
                                   "memory": h.memory.as_dict() if h.memory else None,
                                   "horovod": h.horovod} for h in self.hosts},
                "links": [{"from": link.source, "to": link.target, "rate_bps": link.rate_bps,
                           "latency_ms": link.latency_s * 1000} for link in self.links],
                "latency_ms": self.latency_s * 1000, "params": self.params, "dtype_bytes": self.dtype_bytes,
                "batch_size": self.batch_size, "step_ms": self.step_ms,
                "embeddings": [table.as_dict() for table in self.embeddings],
                "powersgd_bytes_per_s": self.powersgd_bytes_per_s}


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
              embeddings: Sequence[Sequence[float]] = (),
              powersgd_bytes_per_s: float | None = None) -> ProbeResult:
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
        horovod = next((link.target_horovod for link in mine
                        if link.target == host and link.target_horovod is not None), None)
        measures.append(HostMeasure(host, rate, latency, step, speed, memory, horovod))
    listed = None if variables is None else tuple((tuple(int(d) for d in shape), int(size))
                                                  for shape, size in variables)
    tables = tuple(Embedding(int(rows), int(dim), float(lookups)) for rows, dim, lookups in embeddings)
    return ProbeResult(tuple(slots), tuple(measures), tuple(links), params, dtype_bytes, batch_size, listed, tables,
                       powersgd_bytes_per_s)


def default_workers(slots: Sequence[HostSlots], ps: int) -> int:
    """``--workers`` by default: the slots left after the ps tasks (at least 1)."""
    workers = sum(s.slots for s in slots) - ps
    if workers < 1:
        raise ProbeError(with_fix(f"--hosts gives {sum(s.slots for s in slots)} slot(s), none left for a "
                                  f"worker after {ps} ps", "add slots to --hosts, or ask for fewer --ps"),
                         "workers")
    return workers


def build_inputs(found: ProbeResult, workers: int, ps: int, batch_size: int, params: int | None = None,
                 step_ms: float | None = None, dtype_bytes: int | None = None,
                 worker_speeds: Sequence[float] | None = None,
                 overlap: float = 0.0, embeddings: Sequence[Embedding] = ()) -> tuple[Cluster, Workload, ProbeResult]:
    """The advisor's Cluster and Workload from what the probe measured (and what the user gave, with
    the model's embedding tables): ``(cluster, workload, found)``. Raises :class:`AdviseError` with the
    field that is wrong."""
    try:
        cluster = found.to_cluster(workers, ps)
    except LaunchError as exc:  # the placement of --hosts (place_tasks)
        raise AdviseError(str(exc), "hosts") from None
    if worker_speeds is not None:
        if len(worker_speeds) != workers:
            raise AdviseError(with_fix(f"{len(worker_speeds)} speed(s) for {workers} worker(s)",
                                       f"give one speed per worker, e.g. {example_speeds(workers)}"),
                              "speeds")
        cluster = dataclasses.replace(cluster, speeds=tuple(worker_speeds))
    workload = found.to_workload(batch_size, step_ms=step_ms, params=params,
                                 dtype_bytes=None if found.params is not None else dtype_bytes,
                                 overlap=overlap)
    if embeddings:
        workload = dataclasses.replace(workload, embeddings=tuple(embeddings))
    return cluster, workload, found


def render_measured(found: ProbeResult) -> str:
    """The "Measured:" block: per host its link rate, latency, step time and speed; the model."""
    lines = ["Measured:"]
    for host in found.hosts:
        step = f", step {host.step_ms:,.1f} ms, speed {host.speed:.2f}" if host.step_ms is not None else ""
        memory = ""
        if host.memory is not None and host.memory.usable is not None:
            limit = " (cgroup limit)" if host.memory.limit is not None and host.memory.usable == host.memory.limit else ""
            memory = f", memory {format_memory(host.memory.usable)}{limit}"
        lines.append(f"  {host.host}: link {format_rate(host.rate_bps / 8)}, latency "
                     f"{host.latency_s * 1000:.3g} ms{step}{memory}")
    if found.params is not None:
        lines.append(f"  model: {found.params:,} params x {found.dtype_bytes} B, batch {found.batch_size}")
        if found.embeddings:
            lines.append("  Embedding layers: " + "; ".join(table.describe() for table in found.embeddings))
    return "\n".join(lines)
