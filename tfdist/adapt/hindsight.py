"""The end of a planned run, looked back on: every plan predicted again on what the job itself measured.

``tfdist launch --backend auto`` chose its plan from a probe. The chief's record of the run
(``TFDIST_PLAN_RESULT``, written by ``tfdist.callbacks.plan_check.PlanCheck``) carries each epoch's
per-worker figures where the backend measures them (``WorkerMetrics`` of Horovod and
MultiWorkerMirrored: compute and communication time and examples/s per rank). :func:`hindsight`
re-fits the launch-time cost model on them and on the job's own model (its parameter count, in place
of the probe's stand-in model's), with :func:`tfdist.adapt.refit`: each worker's speed, the step's
compute time and, on a ring, the effective link rate (the bytes the model says each rank moves, over
its measured allreduce wait; the record's own byte counters, ``link_bytes_per_step``, are for the
record: they also count whatever else a host sends). Then it predicts every plan again:
the line says whether the plan that ran is still the one to choose, and what each other plan was
predicted to take.

    line = hindsight(decision.cluster, decision.workload, "horovod", json.load(open(result_path)))
    # "tfdist launch: re-fitted on the job's own epochs (worker speeds 1, 0.25): parameter_server
    #  4,191 examples/s, horovod 2,252 (ran): parameter_server would have been 1.86x faster"
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from tfdist.adapt.errors import AdaptError
from tfdist.adapt.measured import EpochMeasurement
from tfdist.adapt.refit import ps_overhead_ms, refit, regime_window, ring_overhead_ms, speeds_at_rest, with_speeds
from tfdist.advise.cost import Prediction, predict_all
from tfdist.advise.errors import AdviseError
from tfdist.advise.model_inputs import MAX_BATCH_SIZE, Cluster, Workload
from tfdist.advise.recommend import CLOSE_RATIO  # inside the model's error: the plan that ran still holds
from tfdist.plan import backend_of

PREFIX = "tfdist launch: re-fitted on the job's own epochs"


def job_workload(workload: Workload, record: Mapping[str, Any]) -> Workload:
    """``workload`` with the job's own parameter count (the record's ``params``) in place of the
    probe's stand-in model's, where the record has one and the workload has no embedding tables, the
    job's own batch per worker (``batch_size``, an adaptive run's report) and its kernels (``matrices``,
    rows and columns) where it has them."""
    params, batch_size = record.get("params"), record.get("batch_size")
    if _whole(batch_size) and batch_size <= MAX_BATCH_SIZE:
        workload = dataclasses.replace(workload, batch_size=batch_size)
    if not _whole(params) or workload.embeddings:
        return workload
    matrices = record.get("matrices")  # the job's own kernels; the probe's stand-in model's go with its count
    if isinstance(matrices, list) and all(isinstance(m, list) and len(m) == 2 and all(map(_whole, m))
                                          for m in matrices):
        try:
            return dataclasses.replace(workload, params=params, matrices=tuple((m, n) for m, n in matrices))
        except AdviseError:  # more than the model's parameters: not the job's own kernels
            pass
    return dataclasses.replace(workload, params=params, matrices=())


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def measured_epochs(record: Mapping[str, Any], variant: str, bytes_per_step: float = 0.0) -> list[EpochMeasurement]:
    """The epochs of a run's record (``worker_epochs``) as :class:`EpochMeasurement`, each worker's
    link traffic ``bytes_per_step`` (the model's, for the job's parameters, not the hosts' counters the
    record may carry; 0 keeps the launch-time link rates), the first epoch left out when there are more
    (tracing and start-up inflate it). Raises :class:`AdaptError` naming the field for a malformed entry."""
    raw = record.get("worker_epochs") or []
    if not isinstance(raw, list):
        raise AdaptError("`worker_epochs` must be a list of epochs", "worker_epochs")
    epochs = []
    for entry in raw:
        workers = entry.get("workers") if isinstance(entry, Mapping) else None
        if not isinstance(workers, list):
            raise AdaptError("`worker_epochs[].workers` must be a list, one entry per worker", "worker_epochs")
        epochs.append(EpochMeasurement.from_dict({
            "epoch": entry.get("epoch"), "variant": variant,
            "workers": [{**worker, "bytes_per_step": bytes_per_step} if isinstance(worker, Mapping) else worker
                        for worker in workers]}))
    return epochs[1:] or epochs


def fixed_cost(cluster: Cluster, workload: Workload, variant: str, record: Mapping[str, Any]) -> tuple[str, float] | None:
    """The job's own fixed cost of a step of ``variant`` from ``record``'s epochs, with the bytes the
    model says it moves for the job's parameters: ``("allreduce_overhead_ms", ms)`` for a ring
    (:func:`tfdist.adapt.refit.ring_overhead_ms`), ``("ps_overhead_ms", ms)`` for parameter servers
    (:func:`tfdist.adapt.refit.ps_overhead_ms`), as the ``Workload`` fields they become; None when
    the epochs say nothing. Raises as :func:`refitted`."""
    workload, epochs = _job_epochs(cluster, workload, variant, record)
    if not epochs:
        return None
    field = fixed_cost_field(variant)
    measure = ps_overhead_ms if field == "ps_overhead_ms" else ring_overhead_ms
    found = measure(cluster, epochs, workload)
    return None if found is None else (field, found)


def fixed_cost_field(variant: str) -> str:
    """The ``Workload`` field that holds the fixed cost of a step of ``variant``: ``ps_overhead_ms``
    for parameter servers, ``allreduce_overhead_ms`` for a ring."""
    return "ps_overhead_ms" if backend_of(variant) == "parameter_server" else "allreduce_overhead_ms"


def _job_epochs(cluster: Cluster, workload: Workload, variant: str,
                record: Mapping[str, Any]) -> tuple[Workload, list[EpochMeasurement]]:
    """The job's workload (:func:`job_workload`) and ``record``'s epochs, each worker's link traffic the
    bytes the model says ``variant`` sends a step for the job's parameters, twice (a ring sends and
    receives at once; a parameter-server worker pulls as much as it pushes)."""
    workload = job_workload(workload, record)
    launched = predict_all(cluster, workload).get(variant)
    sent = launched.wire_bytes if launched is not None else 0.0
    return workload, measured_epochs(record, variant, 2 * sent)


class Refitted(NamedTuple):
    """A record re-fitted on (:func:`refitted`): the cluster, every plan predicted on it, the record's
    epochs the re-fit read (its first left out when there are more), the workload predicted with, and
    the speed on a ring of each parameter-server worker beside the coordinator
    (:func:`tfdist.adapt.refit.speeds_at_rest`), at which every ring plan was predicted."""

    cluster: Cluster
    predictions: dict[str, Prediction]
    epochs: list[EpochMeasurement]
    workload: Workload
    at_rest: dict[int, float]

    @property
    def ring_cluster(self) -> Cluster:
        """The cluster the ring plans were predicted on: the workers of ``at_rest`` at those speeds."""
        return with_speeds(self.cluster, self.at_rest)


def refitted(cluster: Cluster, workload: Workload, variant: str, record: Mapping[str, Any],
             ring_speeds: Sequence[float] | None = None) -> Refitted | None:
    """The cluster re-fitted on ``record``'s epochs (``worker_epochs``, the job's ``params``) and every
    plan predicted on it; None when the record has no per-worker epochs. ``ring_speeds``: the workers'
    speeds when a ring last ran, for :func:`tfdist.adapt.refit.speeds_at_rest`. Raises
    :class:`AdaptError` (a malformed record, another worker count) or :class:`AdviseError` (values
    out of the model's range)."""
    workload, epochs = _job_epochs(cluster, workload, variant, record)
    if not epochs:
        return None
    if len(epochs[0].workers) != cluster.workers:
        raise AdaptError(f"the record has {len(epochs[0].workers)} worker(s), the plan {cluster.workers}",
                         "worker_count")
    fitted, fitted_workload = refit(cluster, workload, epochs)
    found = Refitted(fitted, predict_all(fitted, fitted_workload), epochs, fitted_workload,
                     speeds_at_rest(epochs, ring_speeds))
    if found.at_rest:
        found.predictions.update((name, prediction) for name, prediction
                                 in predict_all(found.ring_cluster, fitted_workload).items()
                                 if backend_of(name) != "parameter_server")
    return found


def as_measured(predictions: Mapping[str, Prediction], variant: str, rate: float) -> dict[str, Prediction]:
    """``predictions`` with ``variant`` at the ``rate`` it measured (examples/s); where that is below its
    prediction and it ran a ring (Horovod, multi-worker mirrored), every other ring plan pays the
    same time a step beyond its prediction: a ring with a straggler says nothing of its links, and
    what its wait holds beyond them (slow links, or the straggler's slow forwarding) each ring would
    wait too. Parameter servers keep their prediction."""
    ran = predictions[variant]
    found = dict(predictions)
    found[variant] = _slower(ran, rate)
    beyond_s = (ran.step_ms * ran.examples_per_second / rate - ran.step_ms) / 1000  # same examples a step
    if beyond_s > 0 and backend_of(variant) != "parameter_server":
        for name, prediction in predictions.items():
            if name != variant and backend_of(name) != "parameter_server":
                step_s = prediction.step_ms / 1000
                found[name] = _slower(prediction, prediction.examples_per_second * step_s / (step_s + beyond_s))
    return found


def _slower(prediction: Prediction, rate: float) -> Prediction:
    """``prediction`` at ``rate`` examples/s, its step scaled to match (the same examples a step)."""
    return dataclasses.replace(prediction, examples_per_second=rate,
                               step_ms=prediction.step_ms * prediction.examples_per_second / rate)


def hindsight(cluster: Cluster, workload: Workload, variant: str, record: Mapping[str, Any],
              unavailable: Collection[str] = ()) -> str | None:
    """One line: every plan's examples/s on the cost model re-fitted from ``record``'s epochs (but the
    plans of the ``unavailable`` backends, which cannot launch on these hosts), fastest
    first, the one that ran marked, at what it measured over the epochs the re-fit read (as the
    Replanner weighs the plan running); and whether another would have been faster by more than
    ``CLOSE_RATIO``. None when the record has no per-worker epochs (a backend that does not measure
    them); a record the model cannot take, or of one epoch only, is said in the line, never raised.

    One epoch is not re-fitted on: tracing and start-up fill it (on the lab's 50 Mbit/s links a
    PowerSGD run's first epoch waited 49-61 ms a step in the allreduce, its next ones 9-11 ms), and the
    fit would read that as slow links, or, with one rank slower to start, keep the probe's links and
    predict twice what the epoch ran. The plan that ran is given as measured because a ring with a
    straggler says nothing of its links (:func:`tfdist.adapt.refit._link_rates`): what its wait holds
    beyond them may be slow links or the straggler's slow forwarding, and the model re-predicted the
    plan that ran at 1.9x what it measured (CI: a PowerSGD job, one rank at 0.63 of the other's speed).
    After parameter servers, the ring plans are predicted on the coordinator's compute (one pass of
    zeros: on the lab 2.4 ms where a ring rank takes 5.4 under its own load), so they read optimistic
    (the run's own decisions take the ring's measured compute, :func:`tfdist.adapt.replan.as_kind`)."""
    raw = record.get("worker_epochs")
    ran_epochs = record.get("epochs")
    if isinstance(raw, list) and len(raw) == 1 and (ran_epochs == 1 or ran_epochs is None):
        return (f"{PREFIX}: not re-fitted: one epoch ran, and its tracing and start-up say little about the "
                "workers and links; run 2 epochs or more")
    try:
        if backend_of(variant) == "parameter_server":  # measured as the Replanner does: its links past it
            measured = fixed_cost(cluster, workload, variant, record)
            if measured is not None:
                workload = dataclasses.replace(workload, **{measured[0]: measured[1]})
        found = refitted(cluster, workload, variant, record)
    except (AdaptError, AdviseError) as exc:
        if isinstance(exc, AdaptError) and exc.field == "worker_count":
            return f"{PREFIX}: not re-fitted: {exc}"
        return f"{PREFIX}: not re-fitted ({exc})"
    if found is None:
        return None
    fitted, predictions, epochs = found.cluster, found.predictions, found.epochs
    predictions = {name: p for name, p in predictions.items()
                   if name == variant or backend_of(name) not in unavailable}
    if variant in predictions:
        window = regime_window(epochs)
        predictions = as_measured(predictions, variant, statistics.median(e.examples_per_second for e in window))
    ranked = sorted(predictions.values(), key=lambda p: -p.examples_per_second)
    figures = ", ".join(f"{p.name} {p.examples_per_second:,.0f}" + (" (ran)" if p.name == variant else "")
                        for p in ranked)
    speeds = ", ".join(f"{speed:.2g}" for speed in fitted.speeds)
    ran = predictions.get(variant)
    best = ranked[0]
    if ran is None or best.name == variant or best.examples_per_second < CLOSE_RATIO * ran.examples_per_second:
        verdict = f"{variant} still holds"
    else:
        verdict = f"{best.name} would have been {best.examples_per_second / ran.examples_per_second:.2f}x faster"
    return f"{PREFIX} (worker speeds {speeds}): {figures} examples/s: {verdict}"


__all__ = ["PREFIX", "Refitted", "as_measured", "fixed_cost", "fixed_cost_field", "hindsight", "job_workload",
           "measured_epochs", "refitted"]
