"""``tfdist launch --backend auto`` re-planning mid-run: run a plan, follow its epochs, switch when the
re-fitted model says another plan finishes sooner, and start that plan where the last one stopped.

:class:`AdaptiveLaunch` runs the job one plan (a segment) at a time through ``start`` (the launcher's
runner: horovodrun or a tf.distribute cluster, blocking). Beside it a thread reads the chief's epoch
reports from the run folder (:mod:`tfdist.run_channel`), asks :class:`tfdist.adapt.replan.Replanner`,
and writes each verdict. After a ``switch`` verdict the tasks checkpoint and end (once the chief has
left, the runner stops the job's other tasks at once rather than wait for a slow host's); the next plan starts
with the same folder, and its ``strategy.fit`` resumes at the next epoch. A switch that changes only
what the running job changes itself (Horovod's compression, ``tfdist.plan.IN_PROCESS_OPTIONS``) is
made in-process: the verdict says ``in_process`` and carries the new plan, every rank takes it, and
the chief says so in the run folder; a job that cannot (its optimizer was not made by tfdist) stops
and restarts as for any switch, and the next decisions price every switch as a restart. The launcher
prints one line per epoch, one line per switch::

    tfdist launch: re-planned at epoch 4: horovod -> parameter_server (measured 1,030 examples/s, predicted
    3,950 for parameter_server; switching took 14.2 s: 2.1 s until the old job ended, 12.1 s until the
    new one had started and restored)
    tfdist launch: re-planned at epoch 6: horovod -> horovod_fp16 in process (measured 262 examples/s,
    predicted 505 for horovod_fp16; switching took 0.1 s, the next epoch traces the step again)

and at the end the total, the time spent switching and what each fixed plan was predicted to take.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tfdist import run_channel
from tfdist.adapt import DEFAULT_MARGIN
from tfdist.adapt.replan import Replanner, Verdict
from tfdist.errors import TfdistError, with_fix
from tfdist.auto.pipeline import Decision
from tfdist.plan import IN_PROCESS_OPTIONS, VARIANTS, backend_of, plan_environment

__all__ = ["AdaptiveLaunch", "RunFolderError", "check_run_folder"]

#: Seconds between two looks at the run folder.
WATCH_POLL_S = 0.1


#: The file that marks a folder as an adaptive run's (only such a folder is emptied for a new run).
MARKER = ".tfdist-run"


class RunFolderError(TfdistError, OSError):
    """The run folder cannot be made fresh; the message names it and the fix."""


def check_run_folder(folder: str) -> None:
    """Refuse (:class:`RunFolderError`) a ``folder`` that holds anything but an adaptive run's files:
    the launcher empties it. The CLI calls it before the probe; :meth:`AdaptiveLaunch.run` again."""
    try:
        foreign = os.path.lexists(folder) and not (os.path.isdir(folder) and (
            not os.listdir(folder) or os.path.exists(os.path.join(folder, MARKER))))
    except OSError as exc:
        raise RunFolderError(with_fix(f"cannot read the run folder {folder} ({exc.strerror or exc})",
                                      "pass another --save-plan, or launch with --no-adapt")) from None
    if foreign:
        raise RunFolderError(with_fix(f"{folder} exists and is not an adaptive run's folder (no {MARKER} in it)",
                                      "move it away, pass another --save-plan, or launch with --no-adapt"))


def _fresh_run_folder(folder: str) -> None:
    """Empty ``folder`` of a previous run (whose state must never be resumed) and mark it; refuse a
    folder that holds anything but a run's files."""
    check_run_folder(folder)
    try:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(run_channel.state_dir(folder))
        with open(os.path.join(folder, MARKER), "w"):
            pass
    except OSError as exc:
        raise RunFolderError(with_fix(f"cannot make the run folder {folder} ({exc.strerror or exc})",
                                      "pass --save-plan in a writable folder, or launch with --no-adapt")) from None


def _next_report(folder: str, epoch: int) -> tuple[int, dict] | None:
    """The report of ``epoch``, else of the lowest later epoch there is one for; None when there is none."""
    report = run_channel.read_json(run_channel.epoch_report_path(folder, epoch))
    if report is not None:
        return epoch, report
    try:
        later = sorted(n for name in os.listdir(folder) if name.startswith("epoch-") and name.endswith(".json")
                       and (n := _epoch_of(name)) is not None and n > epoch)
    except OSError:
        return None
    for number in later:
        report = run_channel.read_json(run_channel.epoch_report_path(folder, number))
        if report is not None:
            return number, report
    return None


def _epoch_of(name: str) -> int | None:
    digits = name[len("epoch-"):-len(".json")]
    return int(digits) if digits.isdigit() else None


@dataclass
class _Switch:
    epoch: int  # epochs done when it was decided
    source: str
    target: str
    measured: float
    predicted: float
    asked_at: float
    took_s: float | None = None
    in_process: bool = False
    #: Seconds from the verdict until the old job had ended (a restart only).
    stopped_s: float | None = None


@dataclass
class AdaptiveLaunch:
    """One adaptive run (see the module docstring). ``start(decision, environ, finished)`` runs one
    segment (the plan inline in ``environ``) and returns its exit code, 0 as soon as ``finished()``
    (polled) says the segment's work is done; ``log`` prints the launcher's lines."""

    decision: Decision
    folder: str
    start: Callable[[Decision, dict[str, str], Callable[[], bool]], int]
    environ: Mapping[str, str]
    result_path: str | None
    log: Callable[[str], None]
    margin: float = DEFAULT_MARGIN
    switches: list[_Switch] = field(default_factory=list)
    #: The decision the last segment ran (the launch's, until a switch); once the run ended, with the
    #: model as the run measured it (the planner's workload: the fixed costs of a step it measured).
    final: Decision | None = None

    def run(self) -> int:
        """Run every segment; the last one's exit code. Raises :class:`RunFolderError` before anything
        starts when the run folder is something else's."""
        _fresh_run_folder(self.folder)
        decision = self.final = self.decision
        self.planner = Replanner(decision.cluster, decision.workload, decision.advice.variant,
                                 decision.advice.predictions, candidates=self._candidates(), margin=self.margin,
                                 memory=decision.advice.memory, in_process=IN_PROCESS_OPTIONS)
        started = time.monotonic()
        next_epoch = 0
        try:
            while True:
                environ = {**self.environ, **plan_environment(decision.plan(), self.result_path),
                           run_channel.ADAPT_ENV: os.path.abspath(self.folder)}
                stop = threading.Event()
                pending: list[_Switch] = []
                watcher = threading.Thread(target=self._watch, args=(next_epoch, stop, pending), daemon=True)
                watcher.start()
                try:
                    code = self.start(decision, environ, lambda: self._left(pending))
                finally:
                    stop.set()
                    watcher.join()
                ended = time.time()
                state = run_channel.read_json(run_channel.state_path(self.folder))
                if (code != 0 or not pending or state is None or state.get("status") != "saved"
                        or state.get("epoch") != pending[-1].epoch):
                    break  # done, failed or interrupted (130): the next plan starts only after a clean stop
                switch = pending[-1]
                switch.stopped_s = max(0.0, ended - switch.asked_at)
                if switch.in_process:  # the job could not change in-process: every switch is a restart now
                    switch.in_process = False
                    self.planner.in_process = frozenset()
                self.switches.append(switch)
                decision = self.final = decision.with_variant(switch.target, self.planner.predictions,
                                                              f"re-planned after epoch {switch.epoch}")
                self.planner.switched(switch.target, switch.epoch)
                next_epoch = switch.epoch
                self.log(f"tfdist launch: starting {decision.backend.name} ({switch.target}) on {decision.hosts}, "
                         f"resuming after epoch {switch.epoch}")
        finally:
            # what the run measured of the model goes with the plan it ended on: the end-of-run re-fit
            # (Decision.hindsight) then reads the links as the run did, past the fixed costs it measured
            self.final = dataclasses.replace(self.final, workload=self.planner.workload)
            self._summary(time.monotonic() - started)
            shutil.rmtree(run_channel.state_dir(self.folder), ignore_errors=True)  # the checkpoints; reports stay
        return code

    def _candidates(self) -> tuple[str, ...]:
        """The variants a switch may take: every one whose backend a run can be stopped and resumed on
        and can launch on these hosts (weighed once a re-fit predicts it: PowerSGD needs the job's
        weight matrices)."""
        unavailable = self.decision.advice.unavailable
        return tuple(name for name in VARIANTS if backend_of(name) in run_channel.ADAPTIVE_BACKENDS
                     and backend_of(name) not in unavailable)

    def _watch(self, epoch: int, stop: threading.Event, pending: list[_Switch]) -> None:
        """Answer each epoch report from ``epoch`` on (the lowest unanswered one: a report the chief could
        not write, or a fit that starts at a later epoch, is skipped) until ``stop``; a switch goes into
        ``pending``; the resumed marker of the last switch times it."""
        last = self.switches[-1] if self.switches else None
        while True:
            if last is not None and last.took_s is None:
                self._timed(last)
            if pending and pending[-1].in_process and self._changed_in_process(pending[-1]):
                pending.pop()
            found = _next_report(self.folder, epoch)
            if found is not None:
                epoch, report = found
                verdict = self._answer(epoch, report, pending)
                try:
                    run_channel.write_json(run_channel.verdict_path(self.folder, epoch), self._said(verdict))
                except (OSError, ValueError) as exc:
                    self.log(f"tfdist launch: cannot write the verdict on epoch {epoch + 1} ({exc}); the run "
                             f"trains on after {run_channel.VERDICT_TIMEOUT_S:.0f} s and stops adapting")
                self.log(f"tfdist launch: {verdict.line}")
                epoch += 1
                continue
            if stop.is_set():
                return
            stop.wait(WATCH_POLL_S)

    def _left(self, pending: list[_Switch]) -> bool:
        """Whether the segment's chief has stopped for the last pending switch (its state saved, its
        files closed): the rest of the job has nothing left to do for this run."""
        return bool(pending) and run_channel.read_json(
            run_channel.left_path(self.folder, pending[-1].epoch)) is not None

    def _changed_in_process(self, switch: _Switch) -> bool:
        """Whether the job took ``switch`` in-process (its chief's marker says so); if so the switch is
        recorded, timed and printed, and the planner follows it (its cost of a restart unchanged)."""
        marker = run_channel.read_json(run_channel.resumed_path(self.folder, switch.epoch))
        if marker is None or marker.get("in_process") is not True or marker.get("variant") != switch.target:
            return False
        at = marker.get("time")
        switch.took_s = max(0.0, at - switch.asked_at) if isinstance(at, (int, float)) and not isinstance(
            at, bool) else 0.0
        self.switches.append(switch)
        self.final = self.final.with_variant(switch.target, self.planner.predictions,
                                             f"re-planned after epoch {switch.epoch}")
        self.planner.switched(switch.target, switch.epoch)
        self.log(f"tfdist launch: re-planned at epoch {switch.epoch}: {switch.source} -> {switch.target} in process "
                 f"(measured {switch.measured:,.0f} examples/s, predicted {switch.predicted:,.0f} for "
                 f"{switch.target}; switching took {switch.took_s:.1f} s, the next epoch traces the step again)")
        return True

    def _timed(self, last: _Switch) -> None:
        """Time ``last`` once the next plan's chief said it resumed, and print the switch's line."""
        resumed = run_channel.read_json(run_channel.resumed_path(self.folder, last.epoch))
        if resumed is None or isinstance(resumed.get("time"), bool) or not isinstance(resumed.get("time"),
                                                                                       (int, float)):
            return
        last.took_s = max(0.0, resumed["time"] - last.asked_at)
        self.planner.restart_s = last.took_s
        phases = "" if last.stopped_s is None else (
            f": {last.stopped_s:.1f} s until the old job ended, {max(0.0, last.took_s - last.stopped_s):.1f} s "
            f"until the new one had started and restored")
        self.log(f"tfdist launch: re-planned at epoch {last.epoch}: {last.source} -> {last.target} (measured "
                 f"{last.measured:,.0f} examples/s, predicted {last.predicted:,.0f} for {last.target}; switching "
                 f"took {last.took_s:.1f} s{phases})")

    def _said(self, verdict: Verdict) -> dict:
        """What the tasks read: the verdict, and for an in-process switch the plan they take."""
        said = verdict.as_dict()
        if verdict.in_process and verdict.to is not None and self.final is not None:
            said["plan"] = self.final.with_variant(verdict.to, self.planner.predictions,
                                                   "changed in process").plan().as_dict()
        return said

    def _answer(self, epoch: int, report: dict, pending: list[_Switch]) -> Verdict:
        """The verdict on one report; a switch goes into ``pending``. Never raises: whatever goes wrong
        keeps the plan (the tasks are waiting for an answer)."""
        try:
            verdict = self.planner.on_epoch(report)
            if verdict.action == run_channel.SWITCH and verdict.to is not None:
                measured = float(report.get("examples_per_second") or 0.0)
                predicted = self.planner.expected_rate(verdict.to)
                pending.append(_Switch(epoch + 1, self.planner.current, verdict.to, measured, predicted, time.time(),
                                       in_process=verdict.in_process))
            return verdict
        except Exception as exc:  # noqa: BLE001  (a bug here must not leave the tasks waiting)
            return Verdict(run_channel.CONTINUE, None, f"epoch {epoch + 1}: no verdict ({type(exc).__name__}: "
                                                       f"{exc}); the plan is kept")

    def _summary(self, total_s: float) -> None:
        switching = sum(s.took_s or 0.0 for s in self.switches)
        fixed = ", ".join(f"{name} {seconds:,.0f} s" for name, seconds in
                          sorted(self.planner.fixed_seconds.items(), key=lambda item: item[1]))
        path = " -> ".join([self.decision.advice.variant, *(s.target for s in self.switches)])
        self.log(f"tfdist launch: adaptive run: {path}; {total_s:,.0f} s in all, {switching:,.1f} s switching "
                 f"({len(self.switches)} switch(es)); training epochs {self.planner.measured_seconds:,.0f} s; a fixed plan "
                 f"(measured where it ran, else predicted): {fixed or 'nothing measured'}")
