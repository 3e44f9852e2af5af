"""The task's half of an adaptive run (``tfdist launch --backend auto``): report each epoch, take the
launcher's verdict, and on a switch leave a checkpoint the next plan resumes from.

``strategy.fit`` adds :class:`AdaptiveEpochs` after the user's callbacks and tfdist's own plan check
(Keras still runs its ``History`` and progress bar, and a tf-keras parameter-server chief its own
checkpoint callbacks, after it) when ``TFDIST_ADAPT`` names a run folder
(:mod:`tfdist.run_channel`) and the strategy was built from the launcher's plan. At each epoch end:

* the chief writes the epoch's report: seconds, examples/s, each worker's compute and communication
  time where the backend splits them (Horovod's ``WorkerMetrics``), the model's parameter count, the
  batch per worker (``fit``'s ``batch_size``, when given), and,
  at the first epoch, whether the run can be resumed on another plan (a checkpoint of the model and
  optimizer written and removed at the start of training: what cannot be written cannot be switched);
* the chief waits for the launcher's verdict on that epoch (at most ``VERDICT_TIMEOUT_S``; then the
  run trains on and stops adapting);
* on a ``switch`` the launcher marks ``in_process`` (a change the running job can make: Horovod's
  compression), every rank makes it through the ``in_process`` change it was given (the train step is
  traced again) and training goes on; the chief writes ``resumed-<E>.json`` saying so. When the change
  cannot be made here (the optimizer was not made by tfdist, Horovod's tf-keras accumulation), the
  chief says why and the switch restarts the job as any other;
* the other tasks follow the chief's decision (``agree``, the strategy's: a Horovod broadcast, a
  MultiWorkerMirrored all-reduce; they never read the folder themselves, so no task can take another
  way);
* on any other ``switch`` the chief writes the model and optimizer (slots and iterations included) with
  ``tf.train.Checkpoint`` into a new folder under ``state/``, then ``state.json`` naming it with the
  epochs done and the run's wall time at the end of the last one (the next plan's clock continues it:
  :func:`resumed_wall_time`). Where a save may run collectives (``every_task_saves``:
  MultiWorkerMirrored), the other workers write a throwaway copy at the same time. Once the chief says
  it saved, training stops and ``strategy.fit`` ends the process (the launcher starts the next plan,
  whose ``fit`` resumes: :func:`saved_state`, :func:`restore`). A checkpoint that cannot be written is
  removed, ``state.json`` says ``failed``, and every task trains on.
"""
from __future__ import annotations

import logging
import math
import os
import shutil
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

import tensorflow as tf
import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import run_channel
from tfdist.callbacks.backup import error_reason
from tfdist.callbacks.plan_check import model_matrices, worker_figures
from tfdist.errors import TfdistError, with_fix
from tfdist.plan import VARIANTS

log = logging.getLogger("tfdist")


def _checkpoint(model: Any) -> tf.train.Checkpoint:
    """What a switch carries over: the model's variables and the optimizer's (slots, iterations)."""
    return tf.train.Checkpoint(model=model, optimizer=model.optimizer)


#: What the chief decided at an epoch end, as every rank gets it (:func:`agree`): train on, stop
#: adapting (no verdict came), ``SWITCH_FROM + i``: stop to switch to the i-th of tfdist.plan.VARIANTS,
#: or ``CHANGE_FROM + i``: change to it in this process.
_VARIANT_NAMES = tuple(VARIANTS)
CONTINUE_CODE, OFF_CODE, SWITCH_FROM = 0, 1, 2
CHANGE_FROM = SWITCH_FROM + len(_VARIANT_NAMES)


class InProcessChange(Protocol):
    """How the running job takes another plan without a restart (``tfdist.strategies.adaptive``)."""

    def problem(self, variant: str) -> str | None:
        """Why this process cannot change to ``variant``, or None when :meth:`apply` can."""

    def apply(self, variant: str, plan: dict[str, Any] | None) -> None:
        """Change to ``variant`` (``plan``: the launcher's plan for it, on the chief), from the next epoch."""


def _alone(value: int, name: str) -> int:
    """The chief's value where one process runs ``fit``: its own."""
    return value


class AdaptiveEpochs(tf_keras.callbacks.Callback):
    """Report epochs to the launcher and follow its verdicts (see the module docstring). Only the chief
    reads and writes the run folder; the other tasks follow what it decided.

    ``agree(value, name)``: the chief's ``value`` on every task (every task calls it at the same point;
    the strategy's collective). ``every_task_saves``: a checkpoint may run collectives, so the other
    tasks write a throwaway one while the chief writes the switch's.
    ``switched_to``: the variant the launcher switched to, once this task stopped for it (else None).
    ``resumed_wall_s``: the run's wall time this plan continues from (None: it started the run).
    """

    def __init__(self, folder: str, is_chief: bool, variant: str, epochs: int, batch_size: int | None = None,
                 timeout: float = run_channel.VERDICT_TIMEOUT_S, resumed_wall_s: float | None = None,
                 in_process: InProcessChange | None = None, agree: Callable[[int, str], int] = _alone,
                 every_task_saves: bool = False) -> None:
        super().__init__()
        self.agree = agree
        self.every_task_saves = every_task_saves
        self.in_process = in_process
        self._plan: dict[str, Any] | None = None
        self.resumed_wall_s = resumed_wall_s
        self.batch_size = batch_size
        self.folder = folder
        self.is_chief = is_chief
        self.variant = variant
        self.epochs = epochs
        self.timeout = timeout
        self.switched_to: str | None = None
        #: The epochs done when this task stopped for a switch (else None).
        self.switched_at: int | None = None
        #: Whether the chief wrote ``left-<E>.json`` (:func:`tell_left`).
        self.told_left = False
        self.resume_problem: str | None = None
        self.off = False
        self._started = self._ended = 0.0

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.is_chief or self.every_task_saves:  # the others' answers are not reported
            self.resume_problem = _resume_problem(self.model, self.folder)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._started = time.monotonic()

    def on_train_end(self, logs: dict | None = None) -> None:
        """After a switch, the chief tells the launcher it left (``strategy.fit`` puts this callback after
        the ones you gave and its own, so their training has ended and event files are flushed). ``fit``
        has not returned yet: freeing its tf.data iterator can stall in TensorFlow (docs/adaptive.md,
        "Not covered yet"), and the launcher need not wait for that."""
        if self.switched_to is not None:
            tell_left(self)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._ended = time.monotonic()
        if self.off:
            return
        code = self._chief_decides(epoch, logs or {}) if self.is_chief else CONTINUE_CODE
        code = self.agree(code, f"tfdist.adapt.epoch.{epoch}")
        if code == OFF_CODE:
            self.off = True
        elif code >= CHANGE_FROM:
            self._change(epoch, _VARIANT_NAMES[code - CHANGE_FROM])
        elif code >= SWITCH_FROM and self._saved(epoch, _VARIANT_NAMES[code - SWITCH_FROM], logs or {}):
            self.switched_to, self.switched_at = _VARIANT_NAMES[code - SWITCH_FROM], epoch + 1
            self.model.stop_training = True

    def _saved(self, epoch: int, target: str, logs: dict[str, Any]) -> bool:
        """Write the switch's state (the chief; with ``every_task_saves`` the others a throwaway copy
        at the same time); whether the chief saved it, on every task (else all train on)."""
        saved = False
        if self.is_chief:
            saved = _save_state(self.model, self.folder, epoch + 1, self.variant, target,
                                _wall_time(logs, self._started, self._ended))
        elif self.every_task_saves:
            _save_throwaway(self.model, self.folder)
        return self.agree(int(saved), f"tfdist.adapt.saved.{epoch}") == 1

    def _change(self, epoch: int, target: str) -> None:
        """Take ``target`` in this process from the next epoch; the chief tells the launcher."""
        self.in_process.apply(target, self._plan if self.is_chief else None)
        log.warning("tfdist adapt: changed to %s in this process after epoch %d (the train step is traced again)",
                    target, epoch + 1)
        if self.is_chief:
            try:
                run_channel.write_json(run_channel.resumed_path(self.folder, epoch + 1),
                                       {"variant": target, "time": time.time(), "in_process": True})
            except (OSError, ValueError) as exc:
                log.warning("tfdist adapt: cannot tell the launcher the plan changed (%s)", exc)
        self.variant = target

    def _chief_decides(self, epoch: int, logs: dict[str, Any]) -> int:
        """Report and wait for the verdict: the code every task follows."""
        self._report(epoch, logs)
        verdict = run_channel.wait_for(run_channel.verdict_path(self.folder, epoch), self.timeout)
        if verdict is None:
            log.warning("tfdist adapt: no verdict from the launcher on epoch %d within %.0f s (is %s on a "
                        "filesystem the launcher sees?); the run trains on with its plan and stops adapting",
                        epoch, self.timeout, self.folder)
            return OFF_CODE
        target = verdict.get("to")
        if verdict.get("action") != run_channel.SWITCH or epoch + 1 >= self.epochs or target not in VARIANTS:
            return CONTINUE_CODE
        if verdict.get("in_process") is True:
            problem = (f"a {self.variant} run changes nothing in process" if self.in_process is None
                       else self.in_process.problem(target))
            if problem is None:
                self._plan = verdict.get("plan") if isinstance(verdict.get("plan"), dict) else None
                return CHANGE_FROM + _VARIANT_NAMES.index(target)
            log.warning("tfdist adapt: cannot change to %s in this process (%s); the job stops and restarts "
                        "with it", target, problem)
        return SWITCH_FROM + _VARIANT_NAMES.index(target)

    def _report(self, epoch: int, logs: dict[str, Any]) -> None:
        seconds = self._ended - self._started
        rate = logs.get("examples_per_second")
        try:
            params = int(self.model.count_params())
        except (AttributeError, TypeError, ValueError):
            params = None
        report = {"epoch": epoch, "variant": self.variant, "epochs": self.epochs, "seconds": seconds,
                  "examples_per_second": float(rate) if rate is not None else None,
                  "workers": worker_figures(logs), "params": params, "matrices": model_matrices(self.model),
                  "batch_size": self.batch_size,
                  "resumable": self.resume_problem is None, "resume_problem": self.resume_problem,
                  "time": time.time()}
        try:
            run_channel.write_json(run_channel.epoch_report_path(self.folder, epoch), report)
        except (OSError, ValueError) as exc:
            log.warning("tfdist adapt: cannot write the epoch report to %s (%s); the launcher keeps the plan",
                        self.folder, exc)


def _resume_problem(model: Any, folder: str) -> str | None:
    """Why this run could not be resumed on another plan, or None: the optimizer must build its slots
    before a restore (a current tf-keras or Keras 3 optimizer), and a checkpoint of the model and its
    optimizer is written to a scratch folder and removed."""
    optimizer = getattr(model, "optimizer", None)
    if not callable(getattr(optimizer, "build", None)):
        return (f"its optimizer ({type(optimizer).__name__}) cannot build its slots before a restore (a legacy "
                "optimizer?)")
    scratch = _scratch(folder, "check")
    try:
        _checkpoint(model).write(os.path.join(scratch, "ckpt"))
    except Exception as exc:  # noqa: BLE001  (TensorFlow raises ValueError, OpError, TypeError, ...)
        return f"its model and optimizer cannot be checkpointed ({type(exc).__name__}: {error_reason(exc)})"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return None


def tell_left(callback: AdaptiveEpochs) -> None:
    """The chief's last act for a switch, once: ``left-<E>.json``, after which the launcher ends the job."""
    if not callback.is_chief or callback.switched_at is None or callback.told_left:
        return
    callback.told_left = True
    try:
        run_channel.write_json(run_channel.left_path(callback.folder, callback.switched_at),
                               {"to": callback.switched_to, "time": time.time()})
    except (OSError, ValueError) as exc:
        log.warning("tfdist adapt: cannot tell the launcher this task ended (%s); it waits for the job", exc)


def _scratch(folder: str, what: str) -> str:
    """A folder of this process's own under the run's state (hosts may share the run folder)."""
    return os.path.join(run_channel.state_dir(folder), f"{what}-{socket.gethostname()}-{os.getpid()}")


def _save_throwaway(model: Any, folder: str) -> None:
    """A task's part in a save that may run collectives: write the checkpoint where it is removed."""
    scratch = _scratch(folder, "throwaway")
    try:
        _checkpoint(model).write(os.path.join(scratch, "ckpt"))
    except Exception as exc:  # noqa: BLE001
        log.warning("tfdist adapt: this worker's copy of the switch's checkpoint failed (%s: %s); the chief's "
                    "decides", type(exc).__name__, error_reason(exc))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _wall_time(logs: dict[str, Any], began: float, ended: float) -> tuple[float, float]:
    """``(wall_time_s, when)``: the run's wall time at the end of the epoch that ran from ``began`` to
    ``ended`` (``time.monotonic()``): ``Throughput``'s, else the epoch's seconds; and when the epoch
    ended, as ``time.time()`` (the wait for the verdict is the switch's)."""
    try:
        wall = float(logs["wall_time_s"])
    except (KeyError, TypeError, ValueError):
        wall = ended - began
    return wall, time.time() - (time.monotonic() - ended)


def _save_state(model: Any, folder: str, epochs_done: int, variant: str, target: str,
                wall: tuple[float, float] | None = None) -> bool:
    """Write the checkpoint of a switch, then ``state.json`` naming it (and ``wall``: the run's wall
    time and when it stood there); whether both were written. A checkpoint that cannot be written is
    removed (and ``state.json`` says ``failed`` where it can)."""
    where = os.path.join(run_channel.state_dir(folder), f"epoch-{epochs_done}")
    try:
        shutil.rmtree(where, ignore_errors=True)
        path = _checkpoint(model).write(os.path.join(where, "ckpt"))
        status = {"status": "saved", "checkpoint": path}
    except Exception as exc:  # noqa: BLE001
        shutil.rmtree(where, ignore_errors=True)
        log.warning("tfdist adapt: cannot write the checkpoint to switch plans (%s: %s); training on",
                    type(exc).__name__, error_reason(exc))
        status = {"status": run_channel.FAILED}
    try:
        timing = {"wall_time_s": wall[0], "wall_time_at": wall[1]} if wall is not None else {}
        run_channel.write_json(run_channel.state_path(folder), {"epoch": epochs_done, "from": variant, "to": target,
                                                                "time": time.time(), **timing, **status})
    except (OSError, ValueError) as exc:
        log.warning("tfdist adapt: cannot write %s (%s); training on", run_channel.state_path(folder), exc)
        shutil.rmtree(where, ignore_errors=True)
        return False
    return status["status"] == "saved"


class ResumeError(TfdistError, RuntimeError):
    """The checkpoint a switch left cannot be restored into this model; the message says the fix."""


def saved_state(folder: str) -> dict[str, Any] | None:
    """What the last switch left in ``folder`` (``state.json``, with its ``epoch`` and ``checkpoint``),
    or None when there is nothing to resume from."""
    state = run_channel.read_json(run_channel.state_path(folder))
    if state is None or state.get("status") != "saved" or not isinstance(state.get("epoch"), int) \
            or isinstance(state.get("epoch"), bool):
        return None
    return state


def restore(model: Any, state: dict[str, Any], scope: Any) -> int:
    """Restore ``state`` (:func:`saved_state`) into ``model`` (built in ``scope``, its optimizer built
    there first so that the slots are restored too); the epochs done. Raises :class:`ResumeError`
    naming the checkpoint and the fix."""
    try:
        with scope:
            model.optimizer.build(model.trainable_variables)
        _checkpoint(model).read(state["checkpoint"]).assert_existing_objects_matched()
        return int(state["epoch"])
    except Exception as exc:  # noqa: BLE001  (TensorFlow's NotFoundError, AssertionError, ValueError, ...)
        raise ResumeError(with_fix(f"tfdist adapt: cannot resume from the checkpoint {state.get('checkpoint')!r} "
                                   f"that the last plan left ({type(exc).__name__}: {error_reason(exc)})",
                                   "relaunch the same script (the same model and optimizer), or launch with "
                                   "--no-adapt")) from None


def resumed_wall_time(folder: str, now: float | None = None) -> float | None:
    """The wall time a resumed run continues from: the last plan's at its last epoch's end plus the
    time since (the switch: checkpoint, new cluster, restore); None without a saved state that says."""
    state = run_channel.read_json(run_channel.state_path(folder))
    if state is None or state.get("status") != "saved":
        return None
    wall, at = state.get("wall_time_s"), state.get("wall_time_at")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (wall, at)):
        return None
    return max(0.0, float(wall)) + max(0.0, (time.time() if now is None else now) - float(at))
