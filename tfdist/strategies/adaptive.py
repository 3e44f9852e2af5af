"""``strategy.fit`` in an adaptive run (``TFDIST_ADAPT``, set by ``tfdist launch --backend auto``):
resume from the checkpoint a switch left, report every epoch to the launcher, and end the process when
the launcher switches plans (:mod:`tfdist.callbacks.adaptive`, :mod:`tfdist.run_channel`).

Only the backends that can be left and resumed take part (``run_channel.ADAPTIVE_BACKENDS``): Horovod
(not elastic), parameter servers and MultiWorkerMirrored.
Elsewhere a run folder is ignored with one warning (the launcher does not set one for them). Only a
process's first ``fit`` is followed: its epochs are the ones the launcher counts.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

from tfdist import run_channel
from tfdist.callbacks.adaptive import (AdaptiveEpochs, ResumeError, restore, resumed_wall_time, saved_state,
                                      tell_left)
from tfdist.callbacks.epoch_clock import EpochClock
from tfdist.plan import (IN_PROCESS_OPTIONS, Plan, PlanError, backend_of, changed_options, in_process_change,
                         parse_plan, variant_options)
from tfdist.runtime import allreduce

log = logging.getLogger("tfdist")
#: Whether this process already ran its adaptive fit: the epochs a launcher follows are one fit's.
_adapted = False


def adaptive_epochs(strategy: Any, model: Any, kwargs: dict[str, Any]) -> AdaptiveEpochs | None:
    """The callback of an adaptive run, after restoring the state a switch left into ``model`` (then
    ``kwargs["initial_epoch"]`` is the next epoch); None when the run does not adapt."""
    global _adapted
    folder = run_channel.folder_from_env()
    if folder is None or strategy.plan is None:
        return None
    if _adapted:
        log.warning("tfdist adapt: only the first strategy.fit of a process is followed by the launcher; this "
                    "one trains on the plan without switching")
        return None
    if strategy.kind not in run_channel.ADAPTIVE_BACKENDS or getattr(strategy.options, "elastic", False):
        log.warning("tfdist adapt: %s is set but a %s strategy does not switch plans; training on without it",
                    run_channel.ADAPT_ENV, strategy.kind)
        return None
    _adapted = True
    done = _resume(strategy, model, folder)
    if done is not None:
        kwargs["initial_epoch"] = max(done, int(kwargs.get("initial_epoch") or 0))
        if strategy.is_chief:
            log.warning("tfdist adapt: resumed on %s after epoch %d (model and optimizer restored)",
                        strategy.plan.variant, done)
            try:
                run_channel.write_json(run_channel.resumed_path(folder, done),
                                       {"variant": strategy.plan.variant, "time": time.time()})
            except (OSError, ValueError) as exc:
                log.warning("tfdist adapt: cannot tell the launcher the run resumed (%s)", exc)
    batch_size = kwargs.get("batch_size")
    return AdaptiveEpochs(folder, strategy.is_chief, strategy.plan.variant, int(kwargs.get("epochs", 1)),
                          batch_size if isinstance(batch_size, int) and not isinstance(batch_size, bool) else None,
                          resumed_wall_s=resumed_wall_time(folder) if done is not None else None,
                          in_process=CompressionChange(strategy, model) if strategy.kind == "horovod" else None,
                          agree=strategy._chief_value, every_task_saves=strategy._export_role().throwaway)


def _resume(strategy: Any, model: Any, folder: str) -> int | None:
    """The epochs done by the plan this one resumes (None: the run starts here), its state restored.

    Every task starts at the chief's epoch (``strategy._loop_agree_epoch``: under Horovod a rank that
    cannot see the folder takes the root rank's weights in the first step's broadcast; under
    MultiWorkerMirrored every worker restores, and one that saw another state fails them all). A
    failed restore fails every task, with the fix."""
    state = saved_state(folder)
    mine = -1 if state is None else int(state["epoch"])
    done = strategy._loop_agree_epoch(mine)
    if done < 0:
        return None
    problem = None
    if state is not None and mine == done:
        try:
            restore(model, state, strategy.scope())
        except ResumeError as exc:
            problem = str(exc)
    problem = strategy._export_role().agree(problem)
    if problem is not None:
        raise ResumeError(problem)
    return done


class CompressionChange:
    """A Horovod job's change of gradient compression without a restart (issue 36: "a change that
    needs no new cluster happens in-process"): the optimizer's allreduce takes the new compression
    (:func:`tfdist.runtime.allreduce.change_compression`), the train step is traced again, and the
    strategy's options and plan, and the callbacks that follow the plan, say the new one."""

    def __init__(self, strategy: Any, model: Any) -> None:
        self.strategy, self.model = strategy, model
        #: Callbacks with ``plan_changed(plan)`` (the run's TensorBoard record, PlanCheck).
        self.followers: list[Any] = []

    def problem(self, variant: str) -> str | None:
        current = self.strategy.plan.variant
        if backend_of(variant) != "horovod" or backend_of(current) != "horovod":
            return f"{current} -> {variant} changes the backend"
        changed = changed_options(current, variant)
        if not changed <= IN_PROCESS_OPTIONS:
            return f"{', '.join(sorted(changed - IN_PROCESS_OPTIONS))} is read when Horovod starts"
        if not in_process_change(current, variant):
            return "PowerSGD's state (error feedback, factors) starts with the job"
        if getattr(self.strategy.options, "elastic", False):
            return "an elastic Horovod job keeps its optimizer's allreduce"
        return allreduce.compression_change_problem(getattr(self.model, "optimizer", None))

    def apply(self, variant: str, plan: dict[str, Any] | None) -> None:
        import horovod.tensorflow as hvd

        compression = variant_options(variant).get("compression", "none")
        allreduce.change_compression(self.model.optimizer, hvd.Compression.fp16 if compression == "fp16"
                                     else hvd.Compression.none)
        self.strategy.options = dataclasses.replace(self.strategy.options, compression=compression)
        self.strategy.plan = self._plan(variant, plan)
        self.model.make_train_function(force=True)  # traced again at the next step, with the new allreduce
        for follower in self.followers:
            follower.plan_changed(self.strategy.plan)

    def _plan(self, variant: str, given: dict[str, Any] | None) -> Plan:
        """The launcher's plan for ``variant`` (the chief has it), else the running one with ``variant``'s
        options and its prediction kept."""
        if given is not None:
            try:
                plan = parse_plan(json.dumps(given), "the launcher's verdict")
                if plan.variant == variant:
                    return plan
            except (PlanError, TypeError, ValueError) as exc:
                log.warning("tfdist adapt: the launcher's plan for %s is unreadable (%s); keeping the "
                            "prediction of %s", variant, exc, self.strategy.plan.variant)
        running = self.strategy.plan
        options = {k: v for k, v in running.options.items() if k not in IN_PROCESS_OPTIONS}
        return dataclasses.replace(running, variant=variant, options={**options, **variant_options(variant)})


def continue_clocks(callbacks: list, callback: AdaptiveEpochs | None) -> None:
    """Join ``callbacks`` to an adaptive run: a resumed plan's epoch clocks (``Throughput``'s and those
    sharing it) continue the run's wall time from where the last plan left it, so that the run's time
    axis (TensorBoard, ``tfdist report``, time to target) counts the switch and every plan once; and the
    callbacks that follow the plan hear of a change made in this process."""
    if callback is None:
        return
    if isinstance(callback.in_process, CompressionChange):
        followers = [each if callable(getattr(each, "plan_changed", None)) else getattr(each, "callback", None)
                     for each in callbacks]
        callback.in_process.followers = [f for f in followers if callable(getattr(f, "plan_changed", None))]
    if callback.resumed_wall_s is None:
        return
    for each in callbacks:
        clock = getattr(getattr(each, "callback", each), "clock", None)
        if isinstance(clock, EpochClock):
            clock.continue_from(callback.resumed_wall_s)


def end_if_switched(callback: AdaptiveEpochs | None) -> None:
    """End this process when the launcher switched plans: the script after ``fit`` (evaluation,
    export) runs in the next plan's job, once training is done. The chief told the launcher it left
    (``run_channel.left_path``) at the end of ``fit``'s callbacks, so the launcher ends the rest of the
    job without waiting for a slow host's tasks, or for ``fit`` to free its data iterator."""
    if callback is None or callback.switched_to is None:
        return
    log.warning("tfdist adapt: switching to %s; this task ends here and the launcher starts the next plan",
                callback.switched_to)
    tell_left(callback)  # where fit's callbacks did not end (on_train_end tells it first)
    raise SystemExit(0)
