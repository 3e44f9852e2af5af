"""Whether to leave the plan running now for another, at an epoch boundary.

The rules (issue 36), on the re-fitted model's predicted seconds per epoch of every variant:

* **Gain over cost and margin**: another plan is taken only when it finishes the remaining epochs,
  its switch included, more than ``margin`` (default 10 %) of the remaining time sooner than staying:
  ``remaining x epoch_alt + switch < (1 - margin) x remaining x epoch_now``.
* **Payback**: the time a switch costs must be won back within the remaining epochs (implied by the
  rule above; told apart in the reason, with the epochs it would need).
* **Hysteresis**: a plan is not left within ``min_stay`` (default 2) epochs of taking it, the plan
  taken at launch included (its first epoch is start-up and tracing).
* **Switch cost**: a change of cluster (another backend, or an option read only at start-up such as
  hierarchical allreduce) restarts the job: the measured cost of the last restart, or
  DEFAULT_RESTART_S before any was measured; a change of an option the strategy applies in-process
  (Horovod's compression) costs IN_PROCESS_SWITCH_S.

    seconds = epoch_seconds(predict_all(cluster, workload), examples_per_epoch=60_000)
    decision = decide(seconds, "horovod", epoch=6, planned_at=0, epochs_remaining=14)
    if decision.switch: ...  # decision.to, decision.reason
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tfdist.adapt.errors import AdaptError, check_number, check_whole
from tfdist.advise.cost import Prediction
from tfdist.errors import with_fix
from tfdist.plan import IN_PROCESS_OPTIONS, VARIANTS, in_process_change

#: Default share of the remaining time a switch must save beyond its cost (``--adapt-margin``).
DEFAULT_MARGIN = 0.10
#: Default epochs a plan is kept after it was taken before it may be left.
DEFAULT_MIN_STAY = 2
#: Cost of a restart (seconds) before one was measured: the benchmarks' first epoch spends 5-20 s on
#: start-up and tracing; with the checkpoint written and read, 30 s.
DEFAULT_RESTART_S = 30.0
#: Cost of an in-process change (seconds): the train step traced again with the new option.
IN_PROCESS_SWITCH_S = 1.0


@dataclasses.dataclass(frozen=True)
class SwitchDecision:
    """What :func:`decide` found.

    switch: leave the current plan; to: the variant to take (None when staying). reason: one line
    with the numbers. stay_s: the remaining epochs on the current plan (seconds). alternative: the
    plan that would finish soonest if taken now, switch included (None when there is none);
    alternative_s: its remaining epochs plus its switch_cost_s.
    """

    switch: bool
    to: str | None
    reason: str
    stay_s: float
    alternative: str | None = None
    alternative_s: float | None = None
    switch_cost_s: float | None = None


def _known(variant: object, field: str) -> str:
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise AdaptError(with_fix(f"`{field}` {variant!r:.80} is not a known variant",
                                  f"give one of {', '.join(VARIANTS)}"), field)
    return variant


def needs_restart(a: str, b: str, in_process: frozenset[str] = IN_PROCESS_OPTIONS) -> bool:
    """Whether going from variant ``a`` to ``b`` needs a new cluster: another backend, or an option
    other than ``in_process`` (default IN_PROCESS_OPTIONS) changed. ``horovod`` -> ``horovod_fp16``: False (in-process);
    ``horovod`` -> ``horovod_hierarchical`` (read at ``hvd.init()``) or ``parameter_server``: True."""
    _known(a, "a")
    _known(b, "b")
    return not in_process_change(a, b, in_process)


def switch_cost(a: str, b: str, restart_s: float | None = None,
                in_process: frozenset[str] = IN_PROCESS_OPTIONS) -> float:
    """Seconds a switch from ``a`` to ``b`` costs: 0 for none, IN_PROCESS_SWITCH_S in-process (an
    option of ``in_process`` changed), else ``restart_s`` (the measured cost of a restart) or
    DEFAULT_RESTART_S when none was measured."""
    if a == b:
        return 0.0
    if not needs_restart(a, b, in_process):
        return IN_PROCESS_SWITCH_S
    if restart_s is None:
        return DEFAULT_RESTART_S
    return check_number(restart_s, "restart_s", "give the seconds the last restart took, or None")


def epoch_seconds(predictions: Mapping[str, Prediction], examples_per_epoch: int) -> dict[str, float]:
    """Predicted seconds per epoch of each variant: ``examples_per_epoch`` (all workers together) at
    its predicted examples/s (:func:`tfdist.advise.cost.predict_all`)."""
    check_whole(examples_per_epoch, "examples_per_epoch", "give the examples one epoch trains, e.g. 60000",
                minimum=1)
    return {name: examples_per_epoch / p.examples_per_second for name, p in predictions.items()}


def _s(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds >= 10 else f"{seconds:.3g} s"


def _percent(share: float) -> str:
    return f"{share * 100:.3g}%"


def decide(seconds_per_epoch: Mapping[str, float], current: str, *, epoch: int, planned_at: int,
           epochs_remaining: int, restart_s: float | None = None, margin: float = DEFAULT_MARGIN,
           min_stay: int = DEFAULT_MIN_STAY, in_process: frozenset[str] = IN_PROCESS_OPTIONS) -> SwitchDecision:
    """Stay on ``current`` or switch, at the boundary after ``epoch`` epochs (after the epoch of index
    i: ``epoch=i + 1``), to the variant of ``seconds_per_epoch`` (predicted seconds per epoch, one per
    variant, ``current``'s included) that finishes the ``epochs_remaining`` soonest, its switch
    included (:func:`switch_cost`), when the module's rules allow it. ``planned_at``: the boundary at
    which ``current`` was taken (0: at launch). ``restart_s``: the measured cost of a restart, None
    before one was measured. ``in_process``: the options a running job changes without a restart.
    """
    _known(current, "current")
    for name, seconds in seconds_per_epoch.items():
        _known(name, "seconds_per_epoch")
        check_number(seconds, f"seconds_per_epoch[{name}]", "give the predicted seconds per epoch, e.g. 7.2",
                     positive=True)
    if current not in seconds_per_epoch:
        raise AdaptError(with_fix(f"`seconds_per_epoch` has no prediction for the current variant {current!r}",
                                  "predict every variant, the current one included (predict_all)"),
                         "seconds_per_epoch")
    epoch = check_whole(epoch, "epoch", "give the epochs done so far")
    planned_at = check_whole(planned_at, "planned_at", "give the epoch at which the plan was taken, 0 at launch")
    if planned_at > epoch:
        raise AdaptError(with_fix(f"`planned_at` {planned_at} is after `epoch` {epoch}",
                                  "give the epoch boundary at which the current plan was taken"), "planned_at")
    remaining = check_whole(epochs_remaining, "epochs_remaining", "give the epochs still to train")
    min_stay = check_whole(min_stay, "min_stay", "give the epochs a plan is kept, e.g. 2")
    margin = check_number(margin, "margin", "give a share from 0 to 1, e.g. 0.1 for 10 %")
    if margin >= 1:
        raise AdaptError(with_fix(f"`margin` must be below 1, got {margin!r}", "e.g. 0.1 for 10 %"), "margin")
    if restart_s is not None:
        check_number(restart_s, "restart_s", "give the seconds the last restart took, or None")

    stay_s = remaining * seconds_per_epoch[current]
    costs = {name: switch_cost(current, name, restart_s, in_process) for name in seconds_per_epoch if name != current}
    totals = {name: remaining * seconds_per_epoch[name] + cost for name, cost in costs.items()}
    if not totals:
        return SwitchDecision(False, None, f"stay on {current}: no other plan is predicted", stay_s)
    best = min(totals, key=totals.__getitem__)  # ties: the first in the mapping's order
    cost = costs[best]
    figures = (f"{remaining} epoch(s) left: {current} {_s(stay_s)}, {best} {_s(totals[best])} with a "
               f"{_s(cost)} switch")

    def stay_because(why: str) -> SwitchDecision:
        return SwitchDecision(False, None, f"stay on {current}: {why}; {figures}", stay_s, best,
                              totals[best], cost)

    if remaining == 0:
        return stay_because("no epoch remains")
    if epoch - planned_at < min_stay:
        return stay_because(f"taken at epoch {planned_at}, kept until epoch {planned_at + min_stay} "
                            f"(min_stay {min_stay})")
    fastest = min(costs, key=seconds_per_epoch.__getitem__)
    if seconds_per_epoch[current] <= seconds_per_epoch[fastest]:
        return stay_because("it is predicted fastest")
    if totals[best] >= stay_s:
        saved = seconds_per_epoch[current] - seconds_per_epoch[fastest]
        return stay_because(f"no switch pays back: {fastest} saves {_s(saved)} an epoch and would need "
                            f"{costs[fastest] / saved:.1f} epochs to win back its switch")
    gain = 1 - totals[best] / stay_s
    if gain <= margin:
        return stay_because(f"{_percent(gain)} sooner is within the margin of {_percent(margin)}")
    payback = cost / (seconds_per_epoch[current] - seconds_per_epoch[best])
    return SwitchDecision(True, best, f"switch {current} -> {best}: {figures}, {_percent(gain)} sooner (margin "
                          f"{_percent(margin)}), paid back after {payback:.1f} epoch(s)", stay_s, best,
                          totals[best], cost)
