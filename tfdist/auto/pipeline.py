"""The ``--backend auto`` pipeline, once: probe -> the advisor's inputs -> memory -> advise -> place -> plan.

``tfdist launch --backend auto`` and ``tfdist advise --probe`` both call :func:`decide`; each command
only parses its options into an :class:`AutoRequest` and maps the errors to its own messages. The
``--hosts`` list arrives parsed (:class:`~tfdist.launch.hosts.HostList`) and is parsed nowhere again;
the backend is the table's entry (:func:`tfdist.launch.backends.backend_named`), so nothing here
compares backend names.

Errors: what stops the measurement (the hosts against ``--workers``/``--ps``, a host the probe cannot
reach or time) is a :class:`MeasureError` carrying the probe's or the launcher's error; what the
advisor refuses afterwards (a value out of its bounds, a model that fits nowhere) is the
:class:`~tfdist.advise.errors.AdviseError` itself, whose ``field`` names the value.

    decision = decide(AutoRequest(HostList.parse("h1:1,h2:1,h3:1"), ps=1, batch_size=64,
                                  model="models:build_model"), log=print)
    decision.backend.name, decision.hosts, decision.workers, decision.plan()
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass

import tfdist.advise as advisor
from tfdist.adapt.hindsight import hindsight
from tfdist.advise.cost import Prediction
from tfdist.advise.errors import AdviseError
from tfdist.advise.model_inputs import (DEFAULT_ALLREDUCE_OVERHEAD_MS, DEFAULT_PS_OVERHEAD_MS, Cluster,
                                        Embedding, Workload)
from tfdist.advise.planner import plan_from_advice
from tfdist.advise.recommend import Advice
from tfdist.advise.render import render
from tfdist.advise.user_inputs import memory_check
from tfdist.errors import TfdistError
from tfdist.launch.backends import Backend, backend_named
from tfdist.launch.errors import LaunchError
from tfdist.launch.commands import horovod_launcher
from tfdist.launch.hosts import HostList, HostSlots, Placement, place_tasks
from tfdist.launch.installed import HorovodInstall
from tfdist.launch.remote import SshOptions
from tfdist.plan import Plan, backend_of
from tfdist.probe import driver
from tfdist.probe.result import ProbeResult, build_inputs, default_workers, render_measured

__all__ = ["FIRST_GUESS", "AutoRequest", "Decision", "MeasureError", "decide"]

#: The model a plan starts from when no ``--model`` was given (``AutoRequest.first_guess``): the
#: benchmarks' small MLP as the lab measured it, 669,706 parameters and 10 ms a step at batch 64 per
#: worker. An adaptive run re-fits both on the job's own epochs (its parameter count, its compute).
FIRST_GUESS = {"params": 669_706, "step_ms": 10.0, "batch_size": 64}


class MeasureError(TfdistError, RuntimeError):
    """The hosts could not be measured; ``cause`` is the probe's or the launcher's error (same message)."""

    def __init__(self, cause: AdviseError | LaunchError) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(frozen=True)
class AutoRequest:
    """What to measure and model: the hosts, the tasks (``workers`` None: the slots left after the ps),
    the model to time and the batch per worker; what the user gave instead of measuring it (``params``,
    ``step_ms``, ... as ``tfdist advise`` takes them); the optimizer whose slots must fit in memory (None:
    no memory check)."""

    hosts: HostList
    ps: int
    batch_size: int | None
    model: str | None = None
    workers: int | None = None
    ssh: SshOptions = SshOptions()
    probe_seconds: float = driver.DEFAULT_SECONDS
    params: int | None = None
    step_ms: float | None = None
    dtype_bytes: int | None = None
    worker_speeds: tuple[float, ...] | None = None
    overlap: float = 0.0
    embeddings: tuple[Embedding, ...] = ()
    ps_epochs_factor: float | None = None
    ps_overhead_ms: float = DEFAULT_PS_OVERHEAD_MS
    allreduce_overhead_ms: float = DEFAULT_ALLREDUCE_OVERHEAD_MS
    optimizer: tuple[str, int] | None = None
    largest_variable: int | None = None
    #: Without ``model``: start from FIRST_GUESS for what is neither measured nor given (else an
    #: :class:`AdviseError` asks for ``--params`` and ``--step-ms``).
    first_guess: bool = False


@dataclass(frozen=True)
class Decision:
    """The advice for the measured hosts and where its backend runs: ``hosts`` is every host of the
    request for a backend with ps tasks, else only the hosts the placement gives workers (``h:n``
    workers each); ``placements`` are the tasks as ``tfdist launch --hosts`` places them."""

    found: ProbeResult
    cluster: Cluster
    workload: Workload
    advice: Advice
    workers: int
    placements: tuple[Placement, ...]
    hosts: HostList
    requested_hosts: HostList | None = None
    guessed: bool = False

    @property
    def backend(self) -> Backend:
        return backend_named(self.advice.recommended)

    def plan(self) -> Plan:
        """The advice as a plan file's content (:func:`tfdist.advise.planner.plan_from_advice`)."""
        return plan_from_advice(self.advice, self.cluster, self.workload)

    def with_variant(self, variant: str, predictions: dict[str, Prediction], reason: str) -> Decision:
        """The same hosts and tasks planned for ``variant`` instead, on ``predictions`` (a re-fit's):
        what an adaptive run switches to. Its hosts are placed as :func:`decide` places them."""
        backend = backend_of(variant)
        advice = dataclasses.replace(self.advice, recommended=backend, variant=variant, predictions=dict(predictions),
                                     reasons=(reason,))
        requested = self.requested_hosts or self.hosts
        hosts = requested if backend_named(backend).ps else _worker_hosts(self.placements)
        return dataclasses.replace(self, advice=advice, hosts=hosts)

    def hindsight(self, result_path: str) -> str | None:
        """The run looked back on: every plan predicted again on the cost model re-fitted from the
        chief's record at ``result_path`` (:func:`tfdist.adapt.hindsight.hindsight`), with this decision's
        workload (after an adaptive run, as the run measured it), leaving out the backends that cannot
        launch here; None without a readable record or per-worker epochs in it."""
        try:
            with open(result_path) as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None
        return hindsight(self.cluster, self.workload, self.advice.variant, record, self.advice.unavailable)

    def describe(self) -> str:
        """What was measured, then the advisor's table: what both commands print."""
        guess = ""
        if self.guessed:
            guess = (f"\n  model: not measured (no --model); a first guess of {self.workload.params:,} params, "
                     f"{self.workload.step_ms:g} ms a step at batch {self.workload.batch_size}, until the job's "
                     "own epochs re-fit it")
        return render_measured(self.found) + guess + "\n\n" + render(self.advice, self.cluster, self.workload)


def decide(request: AutoRequest, log: Callable[[str], None] = lambda message: None,
           launcher_found: Callable[[], bool] = lambda: horovod_launcher() is not None) -> Decision:
    """Probe ``request.hosts`` (progress through ``log``), build the advisor's inputs, check the memory,
    advise among the backends that can launch (:func:`unavailable`; ``launcher_found``: whether
    horovodrun is here) and place: the :class:`Decision`. Raises :class:`MeasureError`, then
    :class:`AdviseError`."""
    workers, found = _measure(request, log)
    guessed = request.first_guess and request.model is None and (request.params is None or request.step_ms is None)
    params, step_ms, batch_size = request.params, request.step_ms, request.batch_size
    if guessed:
        params = FIRST_GUESS["params"] if params is None else params
        step_ms = FIRST_GUESS["step_ms"] if step_ms is None else step_ms
        batch_size = FIRST_GUESS["batch_size"] if batch_size is None else batch_size
    cluster, workload, found = build_inputs(found, workers, request.ps, batch_size, params, step_ms,
                                            request.dtype_bytes, request.worker_speeds, request.overlap,
                                            request.embeddings)
    workload = dataclasses.replace(workload, ps_epochs_factor=request.ps_epochs_factor,
                                   ps_overhead_ms=request.ps_overhead_ms,
                                   allreduce_overhead_ms=request.allreduce_overhead_ms)
    probed = found.host_loads(workers, request.ps) if request.optimizer is not None else None
    memory = memory_check(cluster, workload, request.optimizer, request.largest_variable,
                          variables=found.variables, hosts=probed)
    placements = tuple(place_tasks(request.hosts.slots, workers, request.ps))
    advice = advisor.advise(cluster, workload, memory, unavailable(found, placements, launcher_found()))
    hosts = request.hosts if backend_named(advice.recommended).ps else _worker_hosts(placements)
    return Decision(found, cluster, workload, advice, workers, placements, hosts, request.hosts, guessed)


def _measure(request: AutoRequest, log: Callable[[str], None]) -> tuple[int, ProbeResult]:
    """``(workers, what the probe found)``; :class:`MeasureError` when the hosts cannot be measured."""
    try:
        workers = request.workers if request.workers is not None else default_workers(request.hosts.slots,
                                                                                      request.ps)
        found = driver.probe_hosts(request.hosts, workers, request.ps, model=request.model,
                                   batch_size=request.batch_size, options=request.ssh,
                                   seconds=request.probe_seconds, log=log)
    except (AdviseError, LaunchError) as exc:
        raise MeasureError(exc) from None
    return workers, found


def unavailable(found: ProbeResult, placements: tuple[Placement, ...], launcher: bool) -> dict[str, str]:
    """The backends that cannot launch on the probed hosts, with why: Horovod without ``launcher``
    (horovodrun here) or without its TensorFlow extension on a worker host, as the probe found
    (:class:`tfdist.launch.installed.HorovodInstall`)."""
    working = {placement.host for placement in placements if placement.task_type == "worker"}
    why = HorovodInstall.of(launcher, [(host.host, host.horovod) for host in found.hosts
                                       if host.host in working]).refusal()
    return {} if why is None else {"horovod": why}


def _worker_hosts(placements: tuple[Placement, ...]) -> HostList:
    """The hosts that run a worker, each with as many slots as it runs workers, in placement order."""
    counts: dict[str, int] = {}
    for placement in placements:
        if placement.task_type == "worker":
            counts[placement.host] = counts.get(placement.host, 0) + 1
    return HostList.of([HostSlots(host, count) for host, count in counts.items()])
