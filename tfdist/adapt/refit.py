"""Re-fit the cost model's inputs from the job's own epochs.

The launch-time :class:`~tfdist.advise.model_inputs.Cluster` and
:class:`~tfdist.advise.model_inputs.Workload` came from a probe or from defaults; the job measures
what they stand for. From the last few epochs (the median of each figure over them, so that one
noisy epoch moves nothing; for the compute, only the epochs since who straggles last changed,
:func:`current_regime`, so that a straggler counts from its first epoch; for the links the lower
median, so that of two epochs the slower counts) :func:`refit` takes:

* ``Workload.step_ms``: the fastest worker's compute time of a step;
* ``Cluster.speeds``: each worker's speed relative to it (fastest 1.0; a worker at a quarter of a
  core, computing 4x as long, 0.25);
* ``Cluster.bandwidths``: each worker host's effective link rate, from the bytes its link carried
  per step over the time the step spent communicating (what the model puts there whatever the rate
  taken off: the latency and fixed cost, ``Workload.allreduce_overhead_ms``, of each of the variant's
  rounds, and its own work);

:func:`ps_overhead_ms` measures a parameter-server step's fixed cost on the job (what a worker's
communication holds beyond the wire at the launch-time rate), and :func:`ring_overhead_ms` a ring's:
what a Horovod ring's wait holds beyond the latency and the wire time at the launch-time link rate,
in its even epochs (Horovod's cycle,
negotiation and fusion copies: about 8 ms a step on the lab's unlimited links, where the wire takes
about 1 ms). Without it that time read as slow links, and fp16 compression, which halves the wire
time only, was predicted 1.3x faster where it gained nothing.

    cluster, workload = refit(cluster, workload, measured_epochs)
    predict_all(cluster, workload)   # every plan, on what the job measured

What it keeps: everything else (ps count and placement, latency, overheads, overlap, batch size,
parameters), and the ps hosts' link: a worker's transfer time cannot tell its own link from the ps
link, so that rate stays what the probe (or the user) gave. The link rates are *effective*: protocol and serialisation costs are
inside them, and with ``Workload.overlap`` > 0 the measured wait is the part left exposed, so the rate
comes out high (the re-fit is exact for the default overlap 0). Where the epochs say nothing about a
link (one worker, a single host's ring, no bytes, a wait no longer than the latency) it keeps the
launch-time rate.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

from tfdist.adapt.errors import AdaptError, check_whole
from tfdist.adapt.measured import EpochMeasurement, WorkerEpoch
from tfdist.advise.cost import MWMS_BANDWIDTH_FACTOR, predict_all, ps_serialize_s, ring_link
from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.advise.units import MAX_RATE, MIN_RATE
from tfdist.errors import with_fix

#: Epochs a re-fit reads by default, at most: the median of 3 within one regime (see current_regime).
DEFAULT_LAST_EPOCHS = 3


def refit(cluster: Cluster, workload: Workload, epochs: Sequence[EpochMeasurement], *,
          last: int = DEFAULT_LAST_EPOCHS) -> tuple[Cluster, Workload]:
    """``(cluster, workload)`` with speeds, worker-host links and ``step_ms`` re-fitted from the
    ``last`` epochs (by index) of ``epochs``; each figure is the median over those epochs, the compute
    times over the last ``last`` of the newest epoch's regime (:func:`regime_window`).

    Drop the first epoch of a plan from ``epochs`` (tracing and start-up inflate it). Raises
    :class:`~tfdist.adapt.errors.AdaptError` for no epochs or a worker count other than the cluster's,
    and :class:`~tfdist.advise.errors.AdviseError` when the re-fitted values leave the model's range
    (a worker stalled a million times slower than the fastest).
    """
    checked = _checked(epochs, cluster.workers, last)
    recent, regime = checked[-last:], regime_window(checked, last)
    computes = [statistics.median(e.workers[i].compute_ms for e in regime) for i in range(cluster.workers)]
    step_ms = min(computes)
    speeds = tuple(step_ms / c for c in computes)
    per_epoch = [_link_rates(cluster, workload, e) for e in recent]
    bandwidths = []
    for host, launched in enumerate(cluster.bandwidths):
        seen = [rates[host] for rates in per_epoch if rates[host] is not None]
        # the lower median: of two epochs that say something (the third a straggler's), the slower link,
        # not their mean (links that had just slowed 160x read as half as fast as before: lab scenario C)
        bandwidths.append(min(MAX_RATE, max(MIN_RATE, statistics.median_low(seen))) if seen else launched)
    return (dataclasses.replace(cluster, speeds=speeds, bandwidths=tuple(bandwidths)),
            dataclasses.replace(workload, step_ms=step_ms))


def _recent(epochs: Sequence[EpochMeasurement], workers: int, last: int) -> list[EpochMeasurement]:
    """The ``last`` epochs by index, each checked (:func:`_checked`)."""
    return _checked(epochs, workers, last)[-last:]


def _checked(epochs: Sequence[EpochMeasurement], workers: int, last: int) -> list[EpochMeasurement]:
    """Every epoch by index, each checked to have one measurement per worker."""
    check_whole(last, "last", "read at least 1 epoch, e.g. 3", minimum=1)
    if isinstance(epochs, (str, bytes)) or not isinstance(epochs, Sequence) or not epochs:
        raise AdaptError(with_fix(f"`epochs` must be a non-empty sequence of EpochMeasurement, got "
                                  f"{epochs!r:.80}", "re-fit after the job reported at least one timed epoch"),
                         "epochs")
    for index, epoch in enumerate(epochs):
        if not isinstance(epoch, EpochMeasurement):
            raise AdaptError(with_fix(f"`epochs[{index}]` must be an EpochMeasurement, got {epoch!r:.80}",
                                      "build it with EpochMeasurement(...) or EpochMeasurement.from_dict"),
                             f"epochs[{index}]")
        if len(epoch.workers) != workers:
            raise AdaptError(with_fix(f"epoch {epoch.epoch} measured {len(epoch.workers)} worker(s), the "
                                      f"cluster has {workers}", "re-fit a cluster with the job's workers"),
                             "workers")
    return sorted(epochs, key=lambda e: e.epoch)


#: A ring whose slowest worker computes below this share of the fastest's speed has a straggler.
EVEN_SPEED = 0.75


#: A worker below this share of the fastest's speed straggles clearly: a change of which workers do
#: starts a new regime (:func:`current_regime`). Lower than EVEN_SPEED, so that the noise of a loaded
#: machine (one rank 25-40 % slower for an epoch) is left to the median.
CLEAR_STRAGGLER = 0.5

#: A worker that straggled clearly is even again above this share, not at CLEAR_STRAGGLER: one that
#: hovers about the line (0.45, 0.55, 0.48 of the fastest) stays one regime, not three of one epoch each.
CAUGHT_UP = 0.6


def stragglers(epoch: EpochMeasurement, before: frozenset[int] = frozenset()) -> frozenset[int]:
    """The workers (by index) that straggle clearly in ``epoch``: below ``CLEAR_STRAGGLER`` of the
    fastest worker's speed, or below ``CAUGHT_UP`` for those in ``before`` (the previous epoch's)."""
    fastest = min(w.compute_ms for w in epoch.workers)
    return frozenset(i for i, w in enumerate(epoch.workers)
                     if fastest / w.compute_ms < (CAUGHT_UP if i in before else CLEAR_STRAGGLER))


@dataclasses.dataclass(frozen=True)
class Regime:
    """The newest regime of a run's epochs (:func:`read_regime`): its epochs, by index, and the
    workers that straggle clearly in them."""

    epochs: tuple[EpochMeasurement, ...]
    straggling: frozenset[int]

    def window(self, last: int = DEFAULT_LAST_EPOCHS) -> list[EpochMeasurement]:
        """The epochs a re-fit reads the compute from: the regime's last ``last``."""
        return list(self.epochs[-last:])


def read_regime(epochs: Sequence[EpochMeasurement]) -> Regime:
    """The newest epochs of ``epochs`` (by index) that have the newest epoch's :func:`stragglers`
    (each epoch's read after the one before it): a change of who straggles clearly (a worker slowed
    below ``CLEAR_STRAGGLER`` of the fastest, or caught up above ``CAUGHT_UP``) starts a new regime,
    believed from its first epoch. A median over epochs on both sides of the change would see it only
    once most of them are after it: on the lab (scenario B) the median of three switched at epoch 6
    or 7, each straggling epoch costing about twice a parameter-server one (benchmarks/README.md). The
    price: one epoch in which a worker was slow for a while counts in full; the switch rule's margin
    and payback still stand between it and a switch. Read over all of ``epochs``, so that a worker
    straggling before a re-fit's window still counts as one (:data:`CAUGHT_UP`)."""
    ordered = sorted(epochs, key=lambda e: e.epoch)
    regimes: list[frozenset[int]] = []
    for epoch in ordered:
        regimes.append(stragglers(epoch, regimes[-1] if regimes else frozenset()))
    start = len(ordered)
    while start > 0 and regimes[start - 1] == regimes[-1]:
        start -= 1
    return Regime(tuple(ordered[start:]), regimes[-1] if regimes else frozenset())


def current_regime(epochs: Sequence[EpochMeasurement]) -> list[EpochMeasurement]:
    """The epochs of :func:`read_regime`."""
    return list(read_regime(epochs).epochs)


def regime_window(epochs: Sequence[EpochMeasurement], last: int = DEFAULT_LAST_EPOCHS) -> list[EpochMeasurement]:
    """The epochs a re-fit reads the compute from: the last ``last`` of :func:`read_regime` over all of
    ``epochs``. What the run measured for the current plan is read over the same epochs
    (:class:`tfdist.adapt.replan.Replanner`)."""
    return read_regime(epochs).window(last)


def speeds_at_rest(epochs: Sequence[EpochMeasurement], ring_speeds: Sequence[float] | None = None, *,
                   last: int = DEFAULT_LAST_EPOCHS) -> dict[int, float]:
    """The speed on a ring of each parameter-server worker that shares the coordinator's host
    (``WorkerEpoch.rest_compute_ms``), by worker index, from one plan's ``epochs``: its speed when the
    ring last ran (``ring_speeds``; as fast as the fastest worker when no ring ran), times how much
    faster its host computes at rest now (the median over the :func:`regime_window`) than on the
    plan's first ``last`` epochs (their median: one lucky epoch sets no reference), at most 1.

    Its ``compute_ms`` holds the coordinator's dispatch, which takes the host's CPU from the worker; a
    ring has no coordinator. On the lab, with the chief beside worker 0 on w1 and both workers even,
    worker 0 computed 6.2-7.8 ms a step on parameter servers against worker 1's 2.1-2.7: a ring
    predicted at worker 0's 0.35 came out at 4,270 examples/s, where it had run 8,300, and a run whose
    straggler had recovered stayed on parameter servers however long it had left. The pace is a ratio
    of CPU speed, so it is not shifted like the other workers' (:func:`tfdist.adapt.replan.as_kind`).
    Not seen: a host that changed speed since the ring last ran but before this plan's first epochs."""
    ordered = sorted(epochs, key=lambda e: e.epoch)
    if not ordered:
        return {}
    window = regime_window(ordered, last)
    found = {}
    for worker in range(len(ordered[0].workers)):
        first = [r for e in ordered[:last] if (r := e.workers[worker].rest_compute_ms) is not None]
        now = [r for e in window if (r := e.workers[worker].rest_compute_ms) is not None]
        if first and now:
            then = ring_speeds[worker] if ring_speeds is not None else 1.0
            found[worker] = min(1.0, then * statistics.median(first) / statistics.median(now))
    return found


def with_speeds(cluster: Cluster, speeds: Mapping[int, float]) -> Cluster:
    """``cluster`` with the workers of ``speeds`` (by index) at those speeds."""
    if not speeds:
        return cluster
    return dataclasses.replace(cluster, speeds=tuple(speeds.get(i, s) for i, s in enumerate(cluster.speeds)))


def _speed_share(epoch: EpochMeasurement) -> float:
    """The slowest worker's speed over the fastest's in one epoch (compute time, inverted)."""
    computes = [w.compute_ms for w in epoch.workers]
    return min(computes) / max(computes)


def _ring_wait(epoch: EpochMeasurement) -> tuple[float, float]:
    """``(bytes each way, seconds)`` of a ring's step in one epoch: half the bytes a worker's link
    carried (the median worker's), and the shortest allreduce wait (the slowest worker waits least)."""
    return (statistics.median(w.bytes_per_step for w in epoch.workers) / 2,
            min(w.communication_ms for w in epoch.workers) / 1000)


def ring_overhead_ms(cluster: Cluster, epochs: Sequence[EpochMeasurement], workload: Workload, *,
                     last: int = DEFAULT_LAST_EPOCHS) -> float | None:
    """The job's own fixed cost of a ring step (ms, for ``Workload.allreduce_overhead_ms``): over the
    ``last`` epochs that ran a Horovod ring (not hierarchical) with even workers, the median of what
    :func:`_overhead_ms` finds at ``cluster``'s (launch-time) links; None when no such epoch is there
    (parameter servers, a straggler, one host, no bytes). Links slower than the probe said are the
    re-fit's to find."""
    recent = _recent(epochs, cluster.workers, last)
    found = [ms for epoch in recent if epoch.backend == "horovod" and _is_flat_ring(epoch)
             and _speed_share(epoch) >= EVEN_SPEED and (ms := _overhead_ms(cluster, workload, epoch)) is not None]
    return statistics.median(found) if found else None


def ps_overhead_ms(cluster: Cluster, epochs: Sequence[EpochMeasurement], workload: Workload, *,
                   last: int = DEFAULT_LAST_EPOCHS) -> float | None:
    """The job's own fixed cost of a parameter-server step (ms, for ``Workload.ps_overhead_ms``): over
    the ``last`` epochs that ran parameter servers, the median of what each worker's communication
    holds beyond the latency, the wire time of its bytes at ``cluster``'s (launch-time) link and the
    (de)serialisation; None when no such epoch is there, no bytes, or the ps tasks share the workers'
    hosts (each worker then moves its own share, and every worker's communication is the fastest's
    step less the compute: it cannot be read per worker). On the lab a step's
    communication took 16-18 ms where the 5.4 MB of a pull and a push take about 1.3 ms at the
    probe's rate: the coordinator's dispatch and the RPCs on hosts that share two cores. Read as slow
    links, the re-fit on the parameter servers' own epochs predicted them 1.5x faster than they ran
    (the model's 5 ms default), or, with bytes, the other plans too slow."""
    if not _reads_ps_workers(cluster):
        return None
    found = []
    for epoch in _recent(epochs, cluster.workers, last):
        if epoch.backend != "parameter_server":
            continue
        for worker, measured in enumerate(epoch.workers):
            if measured.bytes_per_step > 0:
                wire = measured.bytes_per_step / cluster.bandwidths[cluster.host_of(worker)]
                found.append(max(0.0, (_ps_wire_and_fixed_s(cluster, workload, measured) - wire) * 1000))
    return statistics.median(found) if found else None


def _reads_ps_workers(cluster: Cluster) -> bool:
    """Whether a parameter-server epoch can be read per worker: not with ps tasks on the workers' hosts
    (each worker then moves its own share, and every worker's communication is the fastest's)."""
    return cluster.ps_placement == "separate"


def _ps_wire_and_fixed_s(cluster: Cluster, workload: Workload, measured: WorkerEpoch) -> float:
    """What a parameter-server worker's communication a step holds besides the model's two latencies
    and the (de)serialisation (s): the wire time of its pull and push, and the step's fixed cost (at
    full speed: the communication is the fastest worker's step less its compute)."""
    return measured.communication_ms / 1000 - 2 * cluster.latency_s - ps_serialize_s(workload)


def _is_flat_ring(epoch: EpochMeasurement) -> bool:
    """The epoch ran a flat ring: Horovod (not hierarchical) or MultiWorkerMirrored."""
    return epoch.backend in ("horovod", "multi_worker_mirrored") and epoch.variant != "horovod_hierarchical"


#: The link rate (bytes/s) at which the model's ring wait is read off (:func:`_fixed_wait_s`); any in range.
_READ_RATE = 1e9


def _model_wait_s(cluster: Cluster, workload: Workload, epoch: EpochMeasurement, rate: float,
                  overhead_ms: float) -> float | None:
    """The slowest worker's wait a step (s) that the model predicts for ``epoch``'s variant on
    ``cluster`` with the epoch's own worker speeds, every link at ``rate`` and the ring's fixed cost
    at ``overhead_ms``, without overlap (a measured wait is what is left exposed); None where the model
    has no such plan (PowerSGD without the job's kernels)."""
    computes = [w.compute_ms for w in epoch.workers]
    fastest = min(computes)
    at = dataclasses.replace(cluster, speeds=tuple(fastest / c for c in computes),
                             bandwidths=(rate,) * len(cluster.bandwidths), intra_host_bandwidth=rate)
    predicted = predict_all(at, dataclasses.replace(workload, step_ms=fastest, overlap=0.0,
                                                    allreduce_overhead_ms=overhead_ms)).get(epoch.variant)
    return None if predicted is None else (predicted.step_ms - max(computes)) / 1000


def _fixed_wait_s(cluster: Cluster, workload: Workload, epoch: EpochMeasurement, overhead_ms: float) -> float | None:
    """What the model puts in the slowest worker's wait for ``epoch``'s variant whatever the link rate
    (s): each round's latency and fixed cost (``overhead_ms``, paced by the slowest worker) and the
    variant's own work (fp16's casts; PowerSGD's products between its two rounds). The wait is
    affine in the inverse of the rate, so two rates give it: the model's own sum, whatever a variant adds."""
    once, twice = (_model_wait_s(cluster, workload, epoch, rate, overhead_ms) for rate in (_READ_RATE, 2 * _READ_RATE))
    return None if once is None or twice is None else 2 * twice - once


def _overhead_ms(cluster: Cluster, workload: Workload, epoch: EpochMeasurement) -> float | None:
    """The ring's fixed cost a round (ms) that, with the wire time of the epoch's bytes at ``cluster``'s
    slowest worker link, makes the model's wait for ``epoch``'s variant the shortest measured one (not
    below 0); None without bytes, hosts to ring over or a plan the model has."""
    sent, waited = _ring_wait(epoch)
    if cluster.workers < 2 or cluster.hosts < 2 or sent <= 0:
        return None
    slowest, _ = ring_link(cluster)  # the flat ring's pace, as the model takes it
    if epoch.backend == "multi_worker_mirrored":
        slowest *= MWMS_BANDWIDTH_FACTOR
    without, with_one = (_fixed_wait_s(cluster, workload, epoch, ms) for ms in (0.0, 1.0))
    if without is None or with_one is None or not with_one > without:
        return None
    return max(0.0, (waited - sent / slowest - without) / (with_one - without))


def _link_rates(cluster: Cluster, workload: Workload, epoch: EpochMeasurement) -> list[float | None]:
    """Each worker host's effective link rate (bytes/s) in one epoch; None where it says nothing.

    Parameter servers: each worker pulls, then pushes, over its own host's link, so its rate is its
    bytes over its communication time, less the model's two latencies and the step's fixed cost and
    (de)serialisation (:func:`tfdist.advise.cost.ps_fixed_s`); a host takes the median of its workers.
    With ps tasks on the workers' hosts nothing is read (each worker moves its own share). A ring (Horovod, MultiWorkerMirrored) sends and receives at once, half the bytes each way,
    at the pace of its slowest link, and a faster worker's wait includes waiting for the slowest worker:
    the ring's time is the shortest wait, and the one rate it shows is every host's (a ring cannot tell
    its links apart), each host's capped as below by its own launch-time rate. MultiWorkerMirrored
    reaches MWMS_BANDWIDTH_FACTOR of a link, so that share is taken off. Hierarchical allreduce is
    skipped: one time cannot separate its two phases' rates.

    A ring with a straggler (its slowest worker below ``EVEN_SPEED`` of the fastest) says nothing about
    the links; they keep the rate of the even epochs the re-fit reads, else the launch-time one (what
    its wait holds beyond them may be slow links or the straggler's slow forwarding: the model cannot
    tell, so the plan that ran is taken at what it measured, :func:`tfdist.adapt.hindsight.hindsight`
    and the Replanner). Taken off a ring's
    wait before its rate is read: what the model puts there whatever the rate (:func:`_fixed_wait_s`:
    the latency and ``workload``'s fixed cost of each round, paced by the slowest worker, and the
    variant's own work: PowerSGD has two rounds and its products, fp16 its casts; the inversion is exact
    on the model's own figures, and on a real ring holds what the model leaves out: under PowerSGD on
    the lab's 50 Mbit/s links, 6 MB/s by the probe, a re-fit with Horovod's fixed cost a round at its
    1 ms default read about 1.7-2.6 MB/s on a loaded machine and 11 on a quiet one; an adaptive run
    re-fits with the cost it measured, :func:`ring_overhead_ms`). A host
    starved of CPU reduces and forwards its share of every chunk as slowly as it computes (on the lab, a
    tenth of a core took the ring's wait from 9 ms to 81 ms on unlimited links), and how slowly depends
    on what else runs on the machine: a bound on the wait its CPU explains (the even epochs' wait times
    its slowdown) held on a quiet lab and failed twice on CI, where other tests ran beside the lab run;
    the wait read as slow links and the run never left the ring. So links changing while a worker
    straggles are not seen until the workers are even again.

    A ring's rate is read above a host's launch-time one only as far as the epoch shows its link
    carrying: its bytes each way per second of the step. A short exchange says little of a link's
    sustained rate: a token bucket (or a switch's buffers) lets a transfer under its burst through at
    once. On the lab's 50 Mbit/s links, which the probe timed at 6 MB/s in bulk, MultiWorkerMirrored with
    PowerSGD moved its 78 kB a step in 5 ms; read as the links' rate (300 MB/s), it predicted the plain
    ring at 3,184 examples/s, which ran 511 there. The price: a short exchange that a link's burst lets
    through is priced at its sustained rate (that run's PowerSGD re-predicted at 2,445 for the 3,475 it ran;
    the plan that ran is taken at what it measured).
    """
    unknown: list[float | None] = [None] * cluster.hosts
    if epoch.backend == "parameter_server":
        if not _reads_ps_workers(cluster):
            return unknown
        found: list[list[float]] = [[] for _ in range(cluster.hosts)]
        for worker, measured in enumerate(epoch.workers):
            seconds = _ps_wire_and_fixed_s(cluster, workload, measured) - workload.ps_overhead_ms / 1000
            if measured.bytes_per_step > 0 and seconds > 0:
                found[cluster.host_of(worker)].append(measured.bytes_per_step / seconds)
        return [statistics.median(rates) if rates else None for rates in found]
    if cluster.workers < 2 or cluster.hosts < 2 or not _is_flat_ring(epoch) or _speed_share(epoch) < EVEN_SPEED:
        return unknown
    sent, waited = _ring_wait(epoch)
    fixed = _fixed_wait_s(cluster, workload, epoch, workload.allreduce_overhead_ms)
    if fixed is None or sent <= 0 or waited - fixed <= 0:
        return unknown
    share = MWMS_BANDWIDTH_FACTOR if epoch.backend == "multi_worker_mirrored" else 1.0
    rate = sent / (waited - fixed)
    carried = sent / (statistics.median(w.compute_ms + w.communication_ms for w in epoch.workers) / 1000)
    return [min(rate, max(launched * share, carried)) / share for launched in cluster.bandwidths]
