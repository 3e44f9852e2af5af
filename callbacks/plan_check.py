"""A run started from a plan, measured against it: one warning when it is slow, one line at the end.

``strategy.fit`` adds ``PlanCheck`` (last, after the ``Throughput`` whose ``examples_per_second`` it
reads) whenever the strategy was built from a plan (``TFDIST_PLAN``). On the chief only:

* after the first timed epoch (the second: the first includes tracing and start-up), a run below
  ``SLOW_RATIO`` of its predicted examples/s logs one warning naming the bottleneck the advisor
  assumed and what to check;
* at the end of training it logs ``tfdist plan: measured X examples/s, predicted Y (R x)`` over the
  epochs after the first (all of them when there was only one), and writes the same figures as JSON
  to ``TFDIST_PLAN_RESULT`` when the launcher set it (``tfdist launch --backend auto`` prints them),
  with each epoch's per-worker figures where the epoch logs have them (``worker_epochs``: Horovod's
  ``WorkerMetrics`` compute and communication time and examples/s per rank, and where measured the
  bytes its host's links carried a step and its peak memory) and the model's parameter
  count (``params``), from which the launcher re-fits the cost model (:mod:`tfdist.adapt`).

The TensorBoard record of the same comparison (``advice/`` scalars) is ``TensorBoardRun``'s.
"""
from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist.atomic_write import write_atomically
from tfdist.plan import PLAN_RESULT_ENV, Plan, compare, slow_warning
from tfdist.runtime.lowrank import matrix_shape

log = logging.getLogger("tfdist")
#: The epoch (0-based) after which a slow run is reported: the first timed one.
CHECK_EPOCH = 1


class PlanCheck(tf_keras.callbacks.Callback):
    """Compare the run's examples/s with ``plan``'s prediction (see the module docstring)."""

    def __init__(self, plan: Plan, is_chief: bool, result_path: str | None = None) -> None:
        super().__init__()
        self.plan = plan
        self.is_chief = is_chief
        self.result_path = result_path if result_path is not None else os.environ.get(PLAN_RESULT_ENV)
        self.rates: list[float] = []
        self.worker_epochs: list[dict[str, Any]] = []
        self.params: int | None = None
        self.matrices: list[list[int]] = []
        self.warned = False

    def on_train_begin(self, logs: dict | None = None) -> None:
        try:  # the job's own model: the launcher re-fits the cost model on it, not on the probe's stand-in
            self.params = int(self.model.count_params())
        except (AttributeError, TypeError, ValueError):  # a model not built yet: the record goes without
            self.params = None
        self.matrices = model_matrices(self.model)

    def plan_changed(self, plan: Plan) -> None:
        """An adaptive run took ``plan`` in this process: the epochs from here on are measured against it."""
        self.plan, self.rates, self.worker_epochs = plan, [], []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        rate = (logs or {}).get("examples_per_second")
        if rate is None:
            return
        self.rates.append(float(rate))
        workers = worker_figures(logs or {})
        if workers:
            self.worker_epochs.append({"epoch": epoch, "workers": workers})
        if self.is_chief and epoch == CHECK_EPOCH and not self.warned:
            warning = slow_warning(self.plan, float(rate))
            if warning is not None:
                self.warned = True
                log.warning("%s", warning)

    def measured(self) -> float | None:
        """Mean examples/s over the epochs after the first (all of them when there was only one)."""
        rates = self.rates[1:] or self.rates
        return sum(rates) / len(rates) if rates else None

    def on_train_end(self, logs: dict | None = None) -> None:
        measured = self.measured()
        if not self.is_chief:
            return
        if measured is None:
            log.warning("tfdist plan: no examples/s measured (no Throughput callback reached an epoch end); "
                        "nothing to compare with the predicted %s examples/s",
                        f"{self.plan.predicted_examples_per_second:,.0f}")
            return
        self.matrices = self.matrices or model_matrices(self.model)  # a model built by its first step
        record = compare(self.plan, measured)
        log.warning("tfdist plan: measured %s examples/s, predicted %s (%.2fx); step %.1f ms, predicted %.1f ms",
                    f"{measured:,.0f}", f"{self.plan.predicted_examples_per_second:,.0f}",
                    record["advice/measured_over_predicted"], record["advice/measured_step_ms"],
                    self.plan.predicted_step_ms)
        if self.result_path:
            _write_json(self.result_path, {"epochs": len(self.rates), **_plain(record),
                                           "predicted_examples_per_second": self.plan.predicted_examples_per_second,
                                           "predicted_step_ms": self.plan.predicted_step_ms,
                                           "worker_epochs": self.worker_epochs, "params": self.params,
                                           "matrices": self.matrices})


def model_matrices(model: Any) -> list[list[int]]:
    """The model's trainable kernels as low-rank compression sees them (rows, columns): what the
    launcher's model counts on the wire for PowerSGD; empty when the model cannot say."""
    try:
        shapes = [tuple(int(d) for d in v.shape) for v in model.trainable_variables]
    except (AttributeError, TypeError, ValueError):
        return []
    return [list(matrix) for shape in shapes if (matrix := matrix_shape(shape)) is not None]


def worker_figures(logs: dict[str, Any]) -> list[dict[str, float]]:
    """Each worker's ``compute_ms``, ``communication_ms`` and ``examples_per_second`` of one epoch, the
    first worker first: Horovod's from ``WorkerMetrics``' keys, parameter servers' from
    ``ParameterServerMetrics``' (:func:`parameter_server_figures`); empty when the logs lack them or
    one is not finite (a train step without the allreduce marks has NaN communication times)."""
    return _horovod_figures(logs) or parameter_server_figures(logs)


def parameter_server_figures(logs: dict[str, Any]) -> list[dict[str, float]]:
    """Each parameter-server worker's step split into compute and communication, from
    ``ParameterServerMetrics``' keys: its step time (dispatch to result), and the compute of one step
    timed on the chief (``local_compute_ms``). Every worker pulls and pushes the same bytes, so the
    communication is taken to be the same for all: the fastest worker's step less that compute (0 when
    the compute is the longer); each worker's compute is its step less it. A straggler's compute comes
    out as long as its step says. A worker on the coordinator's host also has ``rest_compute_ms``
    (``worker/<i>/rest_compute_ms``). Empty without the keys, or when a worker ran no step."""
    steps, rates = [], []
    while f"worker/{len(steps)}/step_time_ms" in logs:
        index = len(steps)
        steps.append(logs[f"worker/{index}/step_time_ms"])
        rates.append(logs.get(f"worker/{index}/examples_per_second"))
    try:
        steps, rates = [float(v) for v in steps], [float(v) for v in rates]
        local = float(logs["local_compute_ms"])
    except (KeyError, TypeError, ValueError):
        return []
    if not steps or not all(math.isfinite(v) and v > 0 for v in (*steps, local)) or not all(
            math.isfinite(v) and v >= 0 for v in rates):
        return []
    communication = max(0.0, min(steps) - local)
    figures = [{"compute_ms": step - communication, "communication_ms": communication, "examples_per_second": rate}
               for step, rate in zip(steps, rates)]
    for index, figure in enumerate(figures):  # a worker beside the coordinator: its host's compute at rest
        try:
            rest = float(logs.get(f"worker/{index}/rest_compute_ms", math.nan))
        except (TypeError, ValueError):
            continue
        if math.isfinite(rest) and rest > 0:
            figure["rest_compute_ms"] = rest
    return figures


def _horovod_figures(logs: dict[str, Any]) -> list[dict[str, float]]:
    """Each rank's figures from ``WorkerMetrics``' keys (see :func:`worker_figures`)."""
    workers = []
    while f"worker/{len(workers)}/compute_time_ms" in logs:
        rank = len(workers)
        figures = {"compute_ms": logs[f"worker/{rank}/compute_time_ms"],
                   "communication_ms": logs.get(f"worker/{rank}/comm_time_ms"),
                   "examples_per_second": logs.get(f"worker/{rank}/examples_per_second")}
        try:
            values = {name: float(value) for name, value in figures.items()}
        except (TypeError, ValueError):
            return []
        if not all(math.isfinite(value) and value >= 0 for value in values.values()):
            return []
        workers.append({**values, **_measured_traffic_and_memory(logs, rank)})
    return workers


def _measured_traffic_and_memory(logs: dict[str, Any], rank: int) -> dict[str, float]:
    """The rank's ``link_bytes_per_step`` and ``memory_bytes`` where ``WorkerMetrics`` measured them."""
    found = {}
    for name, key, scale, positive in (("link_bytes_per_step", "link_bytes_per_step", 1.0, False),
                                       ("memory_bytes", "peak_memory_mb", 1e6, True)):
        try:
            value = float(logs[f"worker/{rank}/{key}"]) * scale
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(value) and (value > 0 if positive else value >= 0):
            found[name] = value
    return found


def _plain(record: dict[str, float]) -> dict[str, float]:
    return {key.removeprefix("advice/"): value for key, value in record.items()}


def _write_json(path: str, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` whole or not at all; a failure is logged, never raised (training is done)."""
    try:
        write_atomically(path, json.dumps(payload, allow_nan=False))
    except (OSError, ValueError) as exc:
        log.warning("tfdist plan: could not write the measured figures to %s (%s)", path, exc)
