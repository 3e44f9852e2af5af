"""The cost model's inputs from what a user typed: a Cluster and a Workload, and the memory verdict.

Shared by ``tfdist advise`` and ``tfdist launch --backend auto``. Every problem is an
:class:`AdviseError` whose ``field`` names the value (``bandwidths``, ``speeds``, ``model``, ...), so
a command maps it to its own option; messages stay one short line whatever the cluster's size. What
the probe measured becomes a Cluster and a Workload in :mod:`tfdist.probe.result` (``build_inputs``).

    cluster, workload = manual_inputs(workers=2, bandwidths=(parse_rate("1gbit"),), params=669_706,
                                      batch_size=64, step_ms=10.0)
    memory = memory_check(cluster, workload, ("adam", 2), worker_memory=64 * 2**30)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from tfdist.advise.errors import AdviseError
from tfdist.advise.memory import HostLoad, MemoryCheck, ModelMemory, check_memory
from tfdist.advise.model_inputs import (DEFAULT_ALLREDUCE_OVERHEAD_MS, DEFAULT_INTRA_HOST_BANDWIDTH,
                                        DEFAULT_LATENCY_S, DEFAULT_PS_OVERHEAD_MS, MAX_SPEED, MAX_WORKERS,
                                        MIN_SPEED, Cluster, Embedding, Workload, example_speeds)
from tfdist.advise.units import format_memory, parse_count, parse_rate, refuse_non_ascii
from tfdist.errors import with_fix

_MAX_MODEL_TEXT = 200


def parse_model_ref(text: str, field: str = "--model") -> str:
    """``text`` if it has the ``MODULE:FUNCTION`` form (``models:build_model``,
    ``pkg.models:build``), else an :class:`AdviseError` naming ``field`` (left out of the message when
    empty: click names the option). Nothing is imported."""
    raw = str(text)
    shown = repr(raw if len(raw) <= 60 else raw[:60] + "...")
    shown = f"{field} {shown}" if field else shown  # click names the option itself: field=""
    fix = "give the function that builds the Keras model as MODULE:FUNCTION, e.g. models:build_model"
    if len(raw) > _MAX_MODEL_TEXT:
        raise AdviseError(with_fix(f"{shown} is too long for MODULE:FUNCTION", fix), "model")
    module, colon, function = raw.strip().partition(":")
    if not colon:
        raise AdviseError(with_fix(f"{shown} is not MODULE:FUNCTION (no colon)", fix), "model")
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise AdviseError(with_fix(f"{shown}: {module!r} is not a module name", fix), "model")
    if not function.isidentifier():
        raise AdviseError(with_fix(f"{shown}: {function!r} is not a function name", fix), "model")
    return raw.strip()


def _subject(field: str, text: str) -> str:
    shown = repr(text if len(text) <= 24 else text[:24] + "...")
    return f"{field} {shown}" if field else shown


def _parts(text: str, field: str, what: str, fix: str, name: str) -> list[str]:
    """``text`` split at commas, at most MAX_WORKERS parts (counted before the list is built)."""
    if text.count(",") >= MAX_WORKERS:
        prefix = f"{field}: " if field else ""
        raise AdviseError(with_fix(f"{prefix}{text.count(',') + 1:,} {what} are more than the advisor models "
                                   f"({MAX_WORKERS:,} workers at most)", fix), name)
    return text.split(",")


def parse_rates(text: str, field: str = "--bandwidth") -> tuple[float, ...]:
    """One link rate, or one per worker host, comma-separated (``1gbit`` or ``1gbit,50mbit``), in
    bytes/s; see :func:`tfdist.advise.units.parse_rate`."""
    parts = _parts(str(text), field, "rates", "give one rate for all hosts, or one per host", "bandwidths")
    return tuple(parse_rate(part, field=field) for part in parts)


def parse_speeds(text: str, field: str = "--worker-speeds") -> tuple[float, ...]:
    """Relative worker speeds, comma-separated (``1,1,0.25``): each a finite number from MIN_SPEED
    to MAX_SPEED (1 = the speed the step time was measured at)."""
    fix = "give one relative speed per worker, e.g. 1,1,0.25 (1 = the speed --step-ms was timed at)"
    speeds = []
    for part in _parts(str(text), field, "speeds", fix, "speeds"):
        refuse_non_ascii(part, field, "0.25")
        try:
            speed = float(part) if len(part) <= 40 else None
        except ValueError:
            speed = None
        if speed is None:
            raise AdviseError(with_fix(f"{_subject(field, part.strip())} is not a number", fix), "speeds")
        if not 0 < speed < float("inf"):
            raise AdviseError(with_fix(f"{_subject(field, part.strip())} is not a positive speed",
                                       "every speed is > 0, e.g. 0.25 for a worker four times slower"),
                              "speeds")
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise AdviseError(with_fix(f"{_subject(field, part.strip())} is not from {MIN_SPEED:g} to "
                                       f"{MAX_SPEED:g}", fix), "speeds")
        speeds.append(speed)
    return tuple(speeds)


_EMBEDDING_FIX = ("give a table as ROWSxDIM[:LOOKUPS], e.g. 1Mx128 or 500kx64:20 (LOOKUPS: ids per example, "
                  "default 1; a mean such as 2.5 for bags of varying size)")


def parse_embedding(text: str, field: str = "--embedding") -> Embedding:
    """``ROWSxDIM[:LOOKUPS]`` (``1Mx128``, ``500kx64:20``, ``1Mx32:2.5``): a table of ROWS x DIM
    parameters (whole counts, with k, M, B suffixes: :func:`parse_count`) and the ids each example looks
    up in it, 1 unless given (a positive number: a mean for bags of varying size)."""
    raw = str(text)
    subject = _subject(field, raw)
    refuse_non_ascii(raw, field, "1Mx128:2.5")
    if len(raw) > 60:
        raise AdviseError(with_fix(f"{subject} is too long for ROWSxDIM[:LOOKUPS]", _EMBEDDING_FIX), "embeddings")
    shape, colon, lookups_text = raw.strip().partition(":")
    rows, x, dim = shape.lower().partition("x")
    if not x or not rows or not dim or (colon and not lookups_text):
        raise AdviseError(with_fix(f"{subject} is not ROWSxDIM[:LOOKUPS]", _EMBEDDING_FIX), "embeddings")
    try:
        counts = [parse_count(part, field="", exact=True) for part in (rows, dim)]
    except AdviseError as exc:
        raise AdviseError(with_fix(f"{subject}: {str(exc).split('; fix:')[0]}", _EMBEDDING_FIX),
                          "embeddings") from None
    lookups = 1.0
    if colon:
        try:
            lookups = float(lookups_text)
        except ValueError:
            lookups = float("nan")
        if not math.isfinite(lookups) or lookups <= 0:
            raise AdviseError(with_fix(f"{subject}: LOOKUPS {lookups_text.strip()!r} is not a positive number",
                                       _EMBEDDING_FIX), "embeddings")
    return Embedding(*counts, lookups=lookups)


def manual_inputs(workers: int, bandwidths: Sequence[float], params: int, batch_size: int, step_ms: float,
                  speeds: Sequence[float] | None = None, workers_per_host: int = 1, ps: int = 0,
                  ps_placement: str = "separate", ps_bandwidth: float | None = None,
                  latency_ms: float = DEFAULT_LATENCY_S * 1000,
                  intra_host_bandwidth: float = DEFAULT_INTRA_HOST_BANDWIDTH, dtype_bytes: int = 4,
                  overlap: float = 0.0, ps_epochs_factor: float | None = None,
                  ps_overhead_ms: float = DEFAULT_PS_OVERHEAD_MS,
                  allreduce_overhead_ms: float = DEFAULT_ALLREDUCE_OVERHEAD_MS,
                  embeddings: Sequence[Embedding] = ()) -> tuple[Cluster, Workload]:
    """The Cluster and Workload a user described (rates in bytes/s, latency in ms); the counts of
    ``bandwidths`` (one, or one per worker host) and ``speeds`` (one per worker) are checked first,
    with messages in the user's terms."""
    host_count = -(-workers // workers_per_host) if workers_per_host >= 1 else 0
    if len(bandwidths) not in (1, host_count):
        raise AdviseError(with_fix(f"{len(bandwidths)} rates for {host_count} worker host(s) ({workers} "
                                   f"workers, {workers_per_host} per host)",
                                   "give one rate for all hosts or one per host"), "bandwidths")
    if speeds is not None and len(speeds) != workers:
        raise AdviseError(with_fix(f"{len(speeds)} speed(s) for {workers} worker(s)",
                                   f"give one speed per worker, e.g. {example_speeds(workers)}"), "speeds")
    cluster = Cluster(workers=workers, bandwidths=tuple(bandwidths), speeds=tuple(speeds or ()),
                      workers_per_host=workers_per_host, ps=ps, ps_placement=ps_placement,
                      ps_bandwidth=ps_bandwidth, latency_s=latency_ms / 1000,
                      intra_host_bandwidth=intra_host_bandwidth)
    workload = Workload(params=params, batch_size=batch_size, step_ms=step_ms, dtype_bytes=dtype_bytes,
                        overlap=overlap, ps_epochs_factor=ps_epochs_factor, ps_overhead_ms=ps_overhead_ms,
                        allreduce_overhead_ms=allreduce_overhead_ms, embeddings=tuple(embeddings))
    return cluster, workload


def described_hosts(cluster: Cluster, ps_memory: int | None = None,
                    worker_memory: int | None = None) -> tuple[HostLoad, ...]:
    """The distinct hosts of a described ``cluster`` and their memory: worker hosts of
    ``workers_per_host`` workers (the last may have fewer) with ``worker_memory``, a ``colocated`` ps
    on its worker host (j on host j mod H), a ``separate`` one on a host of its own with ``ps_memory``.
    Colocated, both options would name the same hosts' memory: two different sizes are an error."""
    colocated = cluster.ps_placement == "colocated"
    if colocated and None not in (ps_memory, worker_memory) and ps_memory != worker_memory:
        raise AdviseError(with_fix(f"--ps-memory {format_memory(ps_memory)} and --worker-memory "
                                   f"{format_memory(worker_memory)} name the same hosts under --ps-placement "
                                   "colocated (each ps runs on a worker host)",
                                   "give the worker hosts' memory once, as --worker-memory"), "ps_memory")
    memory, given = worker_memory, "--worker-memory"
    if colocated and worker_memory is None:
        memory, given = ps_memory, "--ps-memory"
    found: dict[tuple[int, int], HostLoad] = {}
    for host in range(cluster.hosts):
        tasks = (len(cluster.workers_on(host)), cluster.ps_on(host))
        found.setdefault(tasks, HostLoad(*tasks, memory, given=given))
    if (cluster.ps and not colocated) or (not cluster.ps and ps_memory is not None):  # --ps 0: what 1 ps has
        found.setdefault((0, 1), HostLoad(0, 1, ps_memory, given="--ps-memory"))
    return tuple(found.values())


def memory_check(cluster: Cluster, workload: Workload, optimizer: tuple[str, int] | None,
                 largest: int | None = None, ps_memory: int | None = None, worker_memory: int | None = None,
                 variables: Sequence[tuple[Sequence[int], int]] | None = None,
                 hosts: Sequence[HostLoad] | None = None) -> MemoryCheck | None:
    """The memory verdict ``advise`` weighs, for ``tfdist advise`` and ``tfdist launch --backend auto``
    alike (None without an ``optimizer``, as :func:`tfdist.advise.memory.parse_optimizer` gives it).
    The hosts and their memory are the probe's (``hosts``: its placement of the tasks and each host's
    usable memory, ``ProbeResult.host_loads``; ``variables``: the model's, ``ProbeResult.variables``)
    or else described (:func:`described_hosts`: the bytes of each worker's and ps task's host), the
    variables then from the workload's parameter count and ``largest`` (the largest variable's
    parameters).

        advise(cluster, workload, memory_check(cluster, workload, ("adam", 2), worker_memory=64 * 2**30))
    """
    if optimizer is None:
        return None
    name, slots = optimizer
    if hosts is not None and variables:
        model = ModelMemory.from_shapes(variables, name, slots)
    else:
        model = ModelMemory.from_counts(workload.params, workload.dtype_bytes, name, slots, largest)
    if workload.embeddings:  # allreduce: the tables' gradients are the rows every worker's step gathers
        gathered = math.ceil(workload.dense_bytes + cluster.workers * workload.sparse_step_bytes)
        model = dataclasses.replace(model, gradient_bytes=gathered)
    probed = hosts is not None
    if hosts is None:
        hosts = described_hosts(cluster, ps_memory, worker_memory)
    return check_memory(model, cluster.ps, probed=probed, hosts=tuple(hosts))
