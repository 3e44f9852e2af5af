"""A run that re-plans itself: re-fit the cost model from the job's own epochs, and decide whether to switch.

Pure Python (no TensorFlow, nothing started). Each epoch the job reports what it measured
(:class:`EpochMeasurement`); :func:`refit` turns the recent epochs into the cost model's inputs
(each worker's speed, each worker host's effective link rate, the step's compute time);
:func:`tfdist.advise.predict_all` predicts every plan on them; :func:`decide` says whether to leave
the plan running now, with hysteresis (a plan is kept ``min_stay`` epochs) and payback (a switch must
win back its cost, plus a margin, within the remaining epochs). :class:`~tfdist.adapt.replan.Replanner`
follows one run epoch by epoch with them (what ``tfdist launch --backend auto`` asks after every epoch:
:mod:`tfdist.auto.adaptive`); :func:`~tfdist.adapt.hindsight.hindsight` is its look back at the end.

    cluster, workload = refit(cluster, workload, measured_epochs)
    seconds = epoch_seconds(predict_all(cluster, workload), examples_per_epoch=60_000)
    decision = decide(seconds, "horovod", epoch=6, planned_at=0, epochs_remaining=14)
    decision.switch, decision.to, decision.reason

Layering: it may import :mod:`tfdist.advise` (the cost model), :mod:`tfdist.plan` (the variants and
their backends) and ground modules (:mod:`tfdist.errors`); nothing above them: no launch, probe, auto,
cli, strategies or callbacks. The launcher that acts on a decision sits above this package.
"""
from __future__ import annotations

from tfdist.adapt.decision import (DEFAULT_MARGIN, DEFAULT_MIN_STAY, DEFAULT_RESTART_S, IN_PROCESS_SWITCH_S,
                                   SwitchDecision, decide, epoch_seconds, needs_restart, switch_cost)
from tfdist.adapt.errors import AdaptError
from tfdist.adapt.measured import EpochMeasurement, WorkerEpoch
from tfdist.adapt.refit import DEFAULT_LAST_EPOCHS, refit

__all__ = ["DEFAULT_LAST_EPOCHS", "DEFAULT_MARGIN", "DEFAULT_MIN_STAY", "DEFAULT_RESTART_S",
           "IN_PROCESS_SWITCH_S", "AdaptError", "EpochMeasurement", "SwitchDecision", "WorkerEpoch",
           "decide", "epoch_seconds", "needs_restart", "refit", "switch_cost"]
