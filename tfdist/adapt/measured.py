"""One epoch as the job measured it: per worker, the compute and communication time of a step, its
examples/s and the bytes its link carried; and which variant ran.

    epoch = EpochMeasurement(epoch=3, variant="horovod", workers=(
        WorkerEpoch(compute_ms=10.0, communication_ms=42.0, examples_per_second=1220.0, bytes_per_step=5.4e6),
        WorkerEpoch(compute_ms=40.0, communication_ms=12.0, examples_per_second=1220.0, bytes_per_step=5.4e6)))
    EpochMeasurement.from_dict(epoch.as_dict()) == epoch   # the JSON a job reports, read back

Validated on construction: a bad figure raises :class:`~tfdist.adapt.errors.AdaptError` naming the
field (``compute_ms``; ``workers[1].compute_ms`` when read by :meth:`EpochMeasurement.from_dict`) and
the fix.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tfdist.adapt.errors import AdaptError, check_number, check_whole
from tfdist.errors import with_fix
from tfdist.plan import VARIANTS, backend_of

#: Each figure of a worker: (must it be > 0, the fix when it is not a usable number).
_WORKER_FIELDS = {
    "compute_ms": (True, "report the mean compute time of a step in milliseconds, e.g. 10.0"),
    "communication_ms": (False, "report the mean communication time of a step in milliseconds (0 when "
                                "none), e.g. 4.5"),
    "examples_per_second": (False, "report the examples this worker trained per second, e.g. 1200.0"),
    "bytes_per_step": (False, "report the bytes the worker's link carried per step, sent plus received "
                              "(0 when none), e.g. 5.4e6"),
}
#: Optional figures of a worker: (must it be > 0, the fix), left out (None) where nothing measured them.
_OPTIONAL_FIELDS = {
    "rest_compute_ms": (True, "report the compute of a step timed on the worker's host at rest in "
                              "milliseconds, e.g. 2.4, or leave it out"),
    "link_bytes_per_step": (False, "report the bytes the worker's host links carried per step as its "
                                   "network counters saw them, e.g. 5.6e6, or leave it out"),
    "memory_bytes": (True, "report the worker's peak resident memory in bytes, e.g. 1.2e9, or leave it out"),
}


def _optional(values: Mapping[str, Any]) -> dict[str, Any]:
    """The optional figures ``values`` has (their keys, with values not None)."""
    return {field: values[field] for field in _OPTIONAL_FIELDS if values.get(field) is not None}


def _check_worker(values: Mapping[str, Any], prefix: str) -> None:
    for field, (positive, fix) in _WORKER_FIELDS.items():
        check_number(values[field], prefix + field, fix, positive=positive)
    for field, value in _optional(values).items():
        positive, fix = _OPTIONAL_FIELDS[field]
        check_number(value, prefix + field, fix, positive=positive)


def _check_keys(raw: object, expected: Any, name: str, optional: Any = ()) -> Mapping[str, Any]:
    """``raw`` if it is a mapping with exactly the ``expected`` keys (and any of ``optional``), else an
    error naming ``name``."""
    if not isinstance(raw, Mapping):
        raise AdaptError(with_fix(f"`{name}` must be a JSON object, got {raw!r:.80}",
                                  f"give an object with {', '.join(expected)}"), name)
    missing = [k for k in expected if k not in raw]
    unknown = sorted(str(k) for k in raw if k not in expected and k not in optional)
    if missing or unknown:
        problem = f"missing {', '.join(missing)}" if missing else f"unknown key(s) {', '.join(unknown)}"
        also = f" (and optionally {', '.join(optional)})" if optional else ""
        raise AdaptError(with_fix(f"`{name}`: {problem}", f"give exactly {', '.join(expected)}{also}"), name)
    return raw


@dataclasses.dataclass(frozen=True)
class WorkerEpoch:
    """One worker's means over an epoch's steps.

    compute_ms: forward, backward and update of one step, without waiting on others (> 0).
    communication_ms: per step, time spent moving or waiting for variables and gradients: the
    allreduce wait (which includes waiting for a slower worker) or the parameter-server pull and push.
    examples_per_second: the examples this worker trained per second of the epoch.
    bytes_per_step: bytes this worker's link carries per step, sent plus received, as the re-fit takes
    them (the cost model's for the variant that ran: :func:`tfdist.adapt.hindsight.measured_epochs`);
    0 when nothing crossed it.
    rest_compute_ms: for a parameter-server worker on the coordinator's host, one step's compute timed
    there at the epoch's end, the coordinator idle (``ParameterServerMetrics``); None elsewhere. Its
    ``compute_ms`` holds the coordinator's dispatch beside it, which a ring would not
    (:func:`tfdist.adapt.refit.speeds_at_rest`).
    link_bytes_per_step: what the worker's host links carried per training step by its network
    counters (``WorkerMetrics``: Horovod, MultiWorkerMirrored), for the record beside the model's
    ``bytes_per_step``; None where unmeasured.
    memory_bytes: the worker's peak resident memory (``WorkerMetrics``); None where unmeasured.
    """

    compute_ms: float
    communication_ms: float
    examples_per_second: float
    bytes_per_step: float
    rest_compute_ms: float | None = None
    link_bytes_per_step: float | None = None
    memory_bytes: float | None = None

    def __post_init__(self) -> None:
        _check_worker(vars(self), "")


@dataclasses.dataclass(frozen=True)
class EpochMeasurement:
    """One epoch: its index (0 for the first), the variant that ran (a name of
    :data:`tfdist.plan.VARIANTS`) and one :class:`WorkerEpoch` per worker, in task order."""

    epoch: int
    variant: str
    workers: tuple[WorkerEpoch, ...]

    def __post_init__(self) -> None:
        check_whole(self.epoch, "epoch", "give the epoch's index, 0 for the first")
        if not isinstance(self.variant, str) or self.variant not in VARIANTS:
            raise AdaptError(with_fix(f"`variant` {self.variant!r:.80} is not a known variant",
                                      f"give one of {', '.join(VARIANTS)}"), "variant")
        if (not isinstance(self.workers, tuple) or not self.workers
                or not all(isinstance(w, WorkerEpoch) for w in self.workers)):
            raise AdaptError(with_fix(f"`workers` must be a non-empty tuple of WorkerEpoch, got "
                                      f"{self.workers!r:.80}", "give one WorkerEpoch per worker, in task order"),
                             "workers")

    @property
    def backend(self) -> str:
        """The backend the variant ran on: ``horovod_fp16`` -> ``horovod``."""
        return backend_of(self.variant)

    @property
    def examples_per_second(self) -> float:
        """The job's throughput: every worker's examples/s added."""
        return sum(w.examples_per_second for w in self.workers)

    def as_dict(self) -> dict[str, Any]:
        """As a job reports it (JSON-ready)."""
        return {"epoch": self.epoch, "variant": self.variant,
                "workers": [{k: v for k, v in dataclasses.asdict(w).items() if k in _WORKER_FIELDS or v is not None}
                            for w in self.workers]}

    @classmethod
    def from_dict(cls, raw: object) -> EpochMeasurement:
        """The measurement of a job's report (parsed JSON); errors name the field as
        ``workers[1].compute_ms``."""
        raw = _check_keys(raw, ("epoch", "variant", "workers"), "epoch measurement")
        workers = raw["workers"]
        if not isinstance(workers, (list, tuple)):
            raise AdaptError(with_fix(f"`workers` must be a list, got {workers!r:.80}",
                                      "give one object per worker, in task order"), "workers")
        for index, worker in enumerate(workers):
            _check_worker(_check_keys(worker, _WORKER_FIELDS, f"workers[{index}]", _OPTIONAL_FIELDS),
                          f"workers[{index}].")
        return cls(raw["epoch"], raw["variant"], tuple(WorkerEpoch(**w) for w in workers))
