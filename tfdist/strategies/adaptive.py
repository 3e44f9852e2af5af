"""``strategy.fit`` in an adaptive run (``TFDIST_ADAPT``, set by ``tfdist launch --backend auto``):
resume from the checkpoint a switch left, report every epoch to the launcher, and end the process when
the launcher switches plans (:mod:`tfdist.callbacks.adaptive`, :mod:`tfdist.run_channel`).

Only the backends that can be left and resumed take part: Horovod (not elastic) and parameter servers.
Elsewhere a run folder is ignored with one warning (the launcher does not set one for them). Only a
process's first ``fit`` is followed: its epochs are the ones the launcher counts.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from tfdist import run_channel
from tfdist.callbacks.adaptive import AdaptiveEpochs, agree, restore, resumed_wall_time
from tfdist.callbacks.epoch_clock import EpochClock

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
    done = restore(model, folder, strategy.scope())  # each rank that sees the folder (a Horovod fit then
    # broadcasts the root rank's weights and slots to all); every rank starts at the chief's epoch
    done = agree(-1 if done is None else done, "tfdist.adapt.resume")
    done = None if done < 0 else done
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
                          resumed_wall_s=resumed_wall_time(folder) if done is not None else None)


def continue_clocks(callbacks: list, callback: AdaptiveEpochs | None) -> None:
    """A resumed plan's epoch clocks (``Throughput``'s and those sharing it) continue the run's wall
    time from where the last plan left it, so that the run's time axis (TensorBoard, ``tfdist
    report``, time to target) counts the switch and every plan once."""
    if callback is None or callback.resumed_wall_s is None:
        return
    for each in callbacks:
        clock = getattr(getattr(each, "callback", each), "clock", None)
        if isinstance(clock, EpochClock):
            clock.continue_from(callback.resumed_wall_s)


def end_if_switched(callback: AdaptiveEpochs | None) -> None:
    """End this process when the launcher switched plans: the script after ``fit`` (evaluation,
    export) runs in the next plan's job, once training is done."""
    if callback is not None and callback.switched_to is not None:
        log.warning("tfdist adapt: switching to %s; this task ends here and the launcher starts the next plan",
                    callback.switched_to)
        raise SystemExit(0)
