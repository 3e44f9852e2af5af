"""Follow an adaptive run epoch by epoch: re-fit on each report, and say whether to switch plans.

Pure Python. The launcher hands every epoch report of the job (:mod:`tfdist.run_channel`) to
:meth:`Replanner.on_epoch` and writes back the :class:`Verdict`; when the job has stopped for a switch
and the next plan resumed, it calls :meth:`Replanner.switched`. Per plan, its first epoch (start-up,
tracing, a restore) is not re-fitted on; the others are, with :func:`tfdist.adapt.hindsight.refitted`
(the job's own parameter count, each worker's compute and allreduce wait; a ring step's fixed cost
measured once, on the first even ring epochs, and a parameter-server step's on the first epochs on
parameter servers: :func:`tfdist.adapt.hindsight.fixed_cost`), and :func:`decide` picks
among ``candidates`` (the variants whose backend can be switched to) that the advisor may recommend
on the re-fitted predictions (:func:`tfdist.advise.recommend.allowed`: memory, fp16 only where the
wire limits the ring): the plan running at the median
of its measured epochs (the same epochs the re-fit reads), the others as the re-fitted model predicts;
a plan the run switched to before is weighed at that prediction times what it delivered against its
promise then (:meth:`Replanner.expected_rate`), so a plan the model over-rates is not taken twice.

It also keeps what each fixed plan would have taken: every epoch, its measured seconds for the plan that
ran it, and for each other candidate the seconds it was predicted to need (the launch-time predictions
until the first re-fit, then the latest re-fit).

    planner = Replanner(cluster, workload, "horovod", advice.predictions, candidates=("horovod", ...))
    verdict = planner.on_epoch(report)      # verdict.action, verdict.to, verdict.line
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tfdist.adapt.refit import CLEAR_STRAGGLER, Regime, read_regime, with_speeds
from tfdist.adapt.decision import DEFAULT_MARGIN, DEFAULT_MIN_STAY, decide, epoch_seconds, needs_restart
from tfdist.adapt.errors import AdaptError
from tfdist.adapt.hindsight import Refitted, fixed_cost, fixed_cost_field, refitted
from tfdist.advise.cost import Prediction, predict_all
from tfdist.advise.errors import AdviseError
from tfdist.advise.memory import MemoryCheck
from tfdist.advise.recommend import allowed
from tfdist.advise.model_inputs import Cluster, Workload
from tfdist.plan import backend_of
from tfdist.run_channel import CONTINUE, SWITCH

__all__ = ["Replanner", "Verdict", "as_kind"]

#: Bounds on a plan's delivered-over-promised ratio (one odd epoch must not rule a plan out for good).
MIN_DELIVERED, MAX_DELIVERED = 0.2, 5.0


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The answer to one epoch: ``action`` (``continue`` or ``switch``), ``to`` (the variant to switch
    to, else None), ``line`` (what the launcher prints about the epoch) and ``in_process`` (the switch
    changes only options the running job changes itself: no restart)."""

    action: str
    to: str | None
    line: str
    in_process: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "to": self.to, "reason": self.line, "in_process": self.in_process}


def _one_regime(epochs: Sequence[Any], regime: Regime, promised_for: frozenset[int] | None) -> bool:
    """Whether ``epochs`` (a plan's re-fitted epochs, whose newest regime is ``regime``) all ran under
    the regime its promise was made for (``promised_for``: who straggled then): what a plan delivered
    against its promise says something of the model only there; after a worker slowed or caught up,
    the ratio is kept as it was."""
    return (bool(epochs) and promised_for is not None and len(regime.epochs) == len(epochs)
            and regime.straggling == promised_for)


def as_kind(cluster: Cluster, workload: Workload, step_ms: float,
            at_rest: Mapping[int, float] | None = None) -> tuple[Cluster, Workload]:
    """``(cluster, workload)`` re-fitted on one kind's epochs, for the other kind, whose fastest worker
    computed ``step_ms`` a step: every worker's compute shifted by the difference between the two
    kinds' figures for the fastest, so that a slower worker stays as many milliseconds slower (its own
    CPU sets its pace; the two kinds time the fastest's step apart). On the lab, a worker at a quarter
    of a core computed 21.6 ms a step on the ring against 5.4, and 26.7 on parameter servers against
    the coordinator's 2.4. The workers of ``at_rest`` (by index) take the speeds there as they are
    (:func:`tfdist.adapt.refit.speeds_at_rest`)."""
    shift = step_ms - workload.step_ms
    speeds = tuple(step_ms / max(step_ms, workload.step_ms / speed + shift) for speed in cluster.speeds)
    shifted = with_speeds(dataclasses.replace(cluster, speeds=speeds), at_rest or {})
    return shifted, dataclasses.replace(workload, step_ms=step_ms)


class _Inputs(NamedTuple):
    """What a plan was predicted on: the cluster, the workload and the workers' speeds at rest in it
    (:func:`tfdist.adapt.refit.speeds_at_rest`; a prediction made again keeps them as they are)."""

    cluster: Cluster
    workload: Workload
    at_rest: Mapping[int, float]


def _kind(variant: str) -> str:
    """``parameter_server`` or ``ring``: the two ways the workers' compute is timed."""
    return "parameter_server" if backend_of(variant) == "parameter_server" else "ring"


def _number(report: Mapping[str, Any], field: str) -> float | None:
    value = report.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        return None
    return float(value)


class Replanner:
    """One adaptive run's decisions (see the module docstring). ``margin``/``min_stay``: as
    :func:`decide`; ``in_process``: the options the running job changes without a restart (none: every
    switch restarts the job)."""

    def __init__(self, cluster: Cluster, workload: Workload, variant: str, predictions: Mapping[str, Prediction],
                 *, candidates: Sequence[str], margin: float = DEFAULT_MARGIN, min_stay: int = DEFAULT_MIN_STAY,
                 in_process: frozenset[str] = frozenset(), memory: MemoryCheck | None = None) -> None:
        self.cluster, self.workload = cluster, workload
        self.current = variant
        self.planned_at = 0
        #: Every variant a switch may take; each is weighed once a re-fit predicts it (a launch without
        #: --model predicts no PowerSGD until the job reports its weight matrices).
        self.candidates = tuple(candidates)
        self.predictions: dict[str, Prediction] = dict(predictions)
        self.margin, self.min_stay, self.in_process, self.memory = margin, min_stay, in_process, memory
        self.restart_s: float | None = None
        self.segment: list[dict[str, Any]] = []
        #: (seconds, examples) of the current plan's epochs after its first.
        self.timed: list[tuple[float, float]] = []
        #: Seconds each candidate predicted at launch was predicted to need for the epochs so far.
        self.fixed_seconds: dict[str, float] = {name: 0.0 for name in self.candidates if name in predictions}
        self.measured_seconds = 0.0
        #: Why the run cannot switch (a script that cannot be resumed), once known.
        self.problem: str | None = None
        self._told: set[str] = set()
        #: The fixed costs of a step (ms) the job measured, by Workload field (``allreduce_overhead_ms``:
        #: a ring's; ``ps_overhead_ms``: parameter servers'), each once.
        self.fixed_costs: dict[str, float] = {}
        #: Per kind of plan (``ring``, ``parameter_server``), the compute of a step its epochs measured last.
        self.computes: dict[str, float] = {}
        #: Per variant, the (cluster, workload, speeds at rest) its newest prediction was made on, and per
        #: variant switched to, the ones its promise was made on.
        self._inputs: dict[str, _Inputs] = {}
        self._promised_on: dict[str, _Inputs] = {}
        #: Each worker's speed when a ring last ran (re-fitted), for a worker beside the coordinator.
        self._ring_speeds: tuple[float, ...] | None = None
        #: Per variant switched to: the examples/s the re-fit predicted for it when the run switched (made
        #: again once the run measured that plan's fixed cost, which the promise took at its default).
        self.promised: dict[str, float] = {}
        #: Per variant that ran after a switch: its measured examples/s over what the switch promised
        #: (its later predictions are scaled by it: see :meth:`expected_rate`), while who straggles stays
        #: as it was when the plan started.
        self.delivered: dict[str, float] = {}
        #: Who straggled (worker indices) in the newest epoch re-fitted on, and per variant switched to,
        #: who straggled when the switch promised its rate.
        self.straggling: frozenset[int] | None = None
        self.promised_for: dict[str, frozenset[int] | None] = {}

    def switched(self, variant: str, at_epoch: int, took_s: float | None = None) -> None:
        """The job now runs ``variant``, from the boundary after ``at_epoch`` epochs; ``took_s``: what the
        switch cost (the next decisions use it as the cost of a restart)."""
        promised = self.predictions.get(variant)
        if promised is not None and promised.examples_per_second > 0:
            self.promised[variant] = promised.examples_per_second
            inputs = self._inputs.get(variant)
            if inputs is None:
                self.promised_for[variant] = self.straggling
            else:  # who straggles as the promise was predicted, not as the last plan ran
                self._promised_on[variant] = inputs
                self.promised_for[variant] = frozenset(i for i, speed in enumerate(inputs.cluster.speeds)
                                                       if speed < CLEAR_STRAGGLER)
        self.current, self.planned_at, self.segment, self.timed = variant, at_epoch, [], []
        if took_s is not None:
            self.restart_s = took_s

    @property
    def ring_overhead_ms(self) -> float | None:
        """A ring step's fixed cost (ms) as the job measured it, once it did."""
        return self.fixed_costs.get("allreduce_overhead_ms")

    @property
    def ps_overhead_ms(self) -> float | None:
        """A parameter-server step's fixed cost (ms) as the job measured it, once it did."""
        return self.fixed_costs.get("ps_overhead_ms")

    def expected_rate(self, variant: str) -> float:
        """``variant``'s predicted examples/s, scaled by what it delivered against its promise when the run
        last switched to it (the model's own error for that plan on this cluster: on the lab, parameter
        servers re-fitted from a ring's epochs were predicted at 6,354 examples/s and ran 3,300)."""
        return self.predictions[variant].examples_per_second * self.delivered.get(variant, 1.0)

    def on_epoch(self, report: Mapping[str, Any]) -> Verdict:
        """The verdict on a chief's epoch report (never raises: a report the model cannot take keeps the plan)."""
        epoch, epochs = report.get("epoch"), report.get("epochs")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not isinstance(epochs, int) or epoch < 0:
            return Verdict(CONTINUE, None, f"a report without its epoch ({dict(report)!r:.120}): the plan is kept")
        rate, seconds = _number(report, "examples_per_second"), _number(report, "seconds")
        head = f"epoch {epoch + 1}/{epochs} on {self.current}"
        if rate is None or not rate > 0 or seconds is None or not seconds > 0:
            return Verdict(CONTINUE, None, f"{head}: no examples/s measured; the plan is kept")
        self.measured_seconds += seconds
        examples = rate * seconds
        self._add_fixed(examples, seconds)
        head += f": {rate:,.0f} examples/s"
        if report.get("resumable") is False and self.problem is None:
            self.problem = str(report.get("resume_problem") or "it cannot be resumed")
        workers = report.get("workers")
        if isinstance(workers, list) and workers:  # the re-fit leaves the plan's first epoch out itself
            self.segment.append({"epoch": epoch, "workers": workers})
        if epoch == self.planned_at:
            return Verdict(CONTINUE, None, f"{head} (the plan's first epoch: start-up, not re-fitted on)")
        self.timed.append((seconds, examples))
        if not self.segment:
            return self._keep(head, "nothing", f"{self.current} reports no per-worker compute and communication "
                              "time yet: the plan is kept")
        record = {"worker_epochs": self.segment, "params": report.get("params"), "batch_size": report.get("batch_size"),
                  "matrices": report.get("matrices")}
        try:
            measured = self._measure_fixed_cost(record)
            found = refitted(self.cluster, self.workload, self.current, record, self._ring_speeds)
            if found is None:
                return Verdict(CONTINUE, None, f"{head}: the plan is kept")
            self.predictions = self._predict(found)
            if measured is not None:
                self._promise_again(measured)
        except (AdaptError, AdviseError) as exc:
            return Verdict(CONTINUE, None, f"{head}; not re-fitted ({exc}): the plan is kept")
        # the current plan as measured, over the re-fit's epochs (the last few of the current regime)
        segment = found.epochs
        regime = read_regime(segment)
        self.straggling = regime.straggling
        recent = self.timed[-max(1, len(regime.window())):]
        examples = statistics.median(e for _, e in recent)
        takeable = set(allowed(self.predictions, self.memory)) | {self.current}
        seconds_per_epoch = epoch_seconds({name: self.predictions[name] for name in self.candidates
                                           if name in self.predictions and name in takeable},
                                          max(1, round(examples)))
        if self.current not in seconds_per_epoch:
            return Verdict(CONTINUE, None, f"{head}: {self.current} is not re-predicted; the plan is kept")
        seconds_per_epoch[self.current] = statistics.median(s for s, _ in recent)
        if self.current in self.promised and _one_regime(segment, regime, self.promised_for.get(self.current)):
            measured = examples / seconds_per_epoch[self.current]
            self.delivered[self.current] = min(MAX_DELIVERED, max(MIN_DELIVERED, measured / self.promised[self.current]))
        for name in seconds_per_epoch:
            if name != self.current and name in self.delivered:
                seconds_per_epoch[name] /= self.delivered[name]
        decision = decide(seconds_per_epoch, self.current, epoch=epoch + 1, planned_at=self.planned_at,
                          epochs_remaining=max(0, epochs - epoch - 1), restart_s=self.restart_s,
                          margin=self.margin, min_stay=self.min_stay, in_process=self.in_process)
        fitted = f"re-fitted {self.current} {self.predictions[self.current].examples_per_second:,.0f}"
        if decision.switch and self.problem is not None:
            return self._keep(f"{head} ({fitted})", "unresumable",
                              f"{decision.reason}; but the run cannot switch plans: {self.problem}; fix: build the "
                              "model and compile it with a tf-keras or Keras 3 optimizer before strategy.fit, or "
                              "launch with --no-adapt")
        if decision.switch:
            scaled = (f" x {self.delivered[decision.to]:.2f} as it ran before" if decision.to in self.delivered
                      else "")
            return Verdict(SWITCH, decision.to, f"{head} ({fitted}, {decision.to} "
                                                f"{self.expected_rate(decision.to):,.0f}{scaled}): "
                                                f"{decision.reason}",
                           in_process=not needs_restart(self.current, decision.to, self.in_process))
        return Verdict(CONTINUE, None, f"{head} ({fitted}): {decision.reason}")

    def _measure_fixed_cost(self, record: Mapping[str, Any]) -> str | None:
        """Once per kind, from the first epochs that show it (a ring's even ones, any on parameter
        servers): the job's fixed cost of a step becomes the model's, so that what the links do not
        explain is not read as slow links (the re-fit takes it off the wait) and compression is
        credited with the wire time only. A ring's stays at least Horovod's cycle (the 1 ms default);
        parameter servers' replaces the default, a guess. The Workload field it set, if it did now."""
        field = fixed_cost_field(self.current)
        if field in self.fixed_costs:
            return None
        found = fixed_cost(self.cluster, self.workload, self.current, record)
        if found is None:
            return None
        self.fixed_costs[field] = found[1]
        value = found[1] if field == "ps_overhead_ms" else max(self.workload.allreduce_overhead_ms, found[1])
        self.workload = dataclasses.replace(self.workload, **{field: value})
        return field

    def _promise_again(self, field: str) -> None:
        """The promise made for the plan running, made again with the fixed cost ``field`` just measured
        and the compute its own kind measured: what the plan delivers against it is then the model's
        error beyond them, not them again (the model now predicts the plan with them)."""
        made_on = self._promised_on.get(self.current)
        if made_on is None:
            return
        cluster, workload = as_kind(made_on.cluster, made_on.workload, self.computes[_kind(self.current)],
                                    made_on.at_rest)
        again = predict_all(cluster, dataclasses.replace(workload, **{field: getattr(self.workload, field)}))
        if self.current in again and again[self.current].examples_per_second > 0:
            self.promised[self.current] = again[self.current].examples_per_second

    def _predict(self, found: Refitted) -> dict[str, Prediction]:
        """Every plan on the re-fitted cluster; a plan of the other kind (ring or parameter servers) with
        the compute a step took when that kind last ran, where it has (:func:`as_kind`). The two kinds
        time it apart: a ring rank its own forward and backward pass under the job's load, the
        parameter-server coordinator one pass of zeros on its own processor (on the lab 5.4 ms against
        2.4), and a ring predicted on the coordinator's figure (10,376 examples/s where it had run
        8,400) drew a switch back with three epochs left that won nothing (benchmarks/README.md,
        scenario D). A worker beside the parameter-server coordinator runs a ring at its host's pace at
        rest (``Refitted.at_rest``)."""
        kind = _kind(self.current)
        self.computes[kind] = found.workload.step_ms
        if kind == "ring":
            self._ring_speeds = found.cluster.speeds
        predictions = dict(found.predictions)
        ring = _Inputs(found.ring_cluster, found.workload, found.at_rest)
        self._inputs = {name: ring if _kind(name) == "ring" else _Inputs(found.cluster, found.workload, {})
                        for name in predictions}
        for other, step_ms in self.computes.items():
            if other == kind:
                continue
            at_rest = found.at_rest if other == "ring" else {}
            cluster, workload = as_kind(found.cluster, found.workload, step_ms, at_rest)
            for name, prediction in predict_all(cluster, workload).items():
                if _kind(name) == other:
                    predictions[name], self._inputs[name] = prediction, _Inputs(cluster, workload, at_rest)
        return predictions

    def _keep(self, head: str, key: str, why: str) -> Verdict:
        """Continue; ``why`` is said the first time only."""
        if key in self._told:
            return Verdict(CONTINUE, None, head)
        self._told.add(key)
        return Verdict(CONTINUE, None, f"{head}; {why}")

    def _add_fixed(self, examples: float, seconds: float) -> None:
        """The plan running took ``seconds`` (measured); each other is predicted for ``examples``."""
        for name in self.fixed_seconds:
            prediction = self.predictions.get(name)
            if name == self.current:
                self.fixed_seconds[name] += seconds
            elif prediction is not None and prediction.examples_per_second > 0:
                self.fixed_seconds[name] += examples / prediction.examples_per_second
