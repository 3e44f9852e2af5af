"""The launcher's half of an adaptive run (tfdist/auto/adaptive.py), without TensorFlow: the segments
are played by a fake runner that writes the chief's epoch reports into the run folder and reads the
verdicts, as tfdist.callbacks.adaptive does; the decision comes from a probe faked as in the CLI tests."""
from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from tfdist import run_channel
from tfdist.auto import AutoRequest, decide
from tfdist.auto.adaptive import MARKER, AdaptiveLaunch, RunFolderError
from tfdist.launch.hosts import HostList, parse_hosts
from tfdist.plan import PLAN_ENV
from tfdist.probe import driver as probe

EPOCHS = 20  # a switch at the fourth epoch pays back its 30 s restart


def _decide(monkeypatch, horovod_on_w2: bool = True):
    import tfdist.auto.adaptive

    monkeypatch.setattr(tfdist.auto.adaptive, "WATCH_POLL_S", 0.01)
    def fake(hosts_text, workers, ps, model=None, batch_size=None, **kwargs):
        links = [probe.LinkMeasure(a, b, 10e9, 1e-4, target_horovod=horovod_on_w2 or b != "w2")
                 for a, b in probe.ring(["w1", "w2", "p"])]
        return probe.aggregate(parse_hosts(hosts_text), links, steps={"w1": 10.0, "w2": 10.0}, params=669_706,
                               dtype_bytes=4, batch_size=batch_size)

    monkeypatch.setattr(probe, "probe_hosts", fake)
    return decide(AutoRequest(HostList.parse("w1:1,w2:1,p:1"), ps=1, batch_size=64, model="m:f"),
                  launcher_found=lambda: True)


@pytest.fixture
def decision(monkeypatch):
    found = _decide(monkeypatch)
    assert found.advice.variant == "horovod"  # even workers on 10 Gbit/s links
    return found


def report(epoch: int, variant: str, computes: tuple[float, float] | None, wait_ms: float = 2.0) -> dict:
    step_ms = max(computes or (10.0,)) + wait_ms
    workers = [] if computes is None else [
        {"compute_ms": c, "communication_ms": step_ms - c, "examples_per_second": 64_000 / step_ms} for c in computes]
    return {"epoch": epoch, "variant": variant, "epochs": EPOCHS, "seconds": 400 * step_ms / 1000,
            "examples_per_second": 128_000 / step_ms, "workers": workers, "params": 669_706, "batch_size": 64,
            "resumable": True, "resume_problem": None, "time": time.time()}


class Chief:
    """Plays the tasks of every segment: reports epochs, waits for each verdict, writes the state on a
    switch and the resumed marker after one. ``slow_from``: the epoch from which w2 computes 4x as long;
    ``links_slow_from``: the epoch from which the ring's wait is 60 ms a step (links slowed, workers
    even); ``even_wait_ms``: the ring's wait a step before that; ``missing``: epochs whose report is never
    written; ``fail``: the exit code of a segment that switched; ``changes``: whether the tasks make an ``in_process`` switch in-process (as a Horovod job
    with tfdist's optimizer does) or stop for it (an optimizer tfdist cannot reach)."""

    def __init__(self, folder: Path, slow_from: int = 2, missing: tuple[int, ...] = (), fail: int = 0,
                 links_slow_from: int | None = None, changes: bool = True, even_wait_ms: float = 2.0) -> None:
        self.folder, self.slow_from, self.missing, self.fail = folder, slow_from, missing, fail
        self.links_slow_from, self.changes, self.even_wait_ms = links_slow_from, changes, even_wait_ms
        self.segments: list[tuple[str, str, dict]] = []
        self.verdicts: list[dict] = []
        self.stopped_early = 0

    def __call__(self, decision, environ, finished) -> int:
        assert environ[run_channel.ADAPT_ENV] == str(self.folder)
        assert not finished()  # a new segment has work to do
        variant = json.loads(environ[PLAN_ENV])["variant"]  # the plan the tasks get
        self.segments.append((decision.backend.name, variant, dict(environ)))
        state = run_channel.read_json(run_channel.state_path(str(self.folder)))
        first = state["epoch"] if state else 0
        if state:
            run_channel.write_json(run_channel.resumed_path(str(self.folder), first), {"time": time.time()})
        for epoch in range(first, EPOCHS):
            if epoch in self.missing:
                continue
            computes = None if variant == "parameter_server" else (
                (10.0, 40.0) if epoch >= self.slow_from else (10.0, 10.0))
            slow_links = self.links_slow_from is not None and epoch >= self.links_slow_from
            wait = (60.0 if variant == "horovod" else 30.0) if slow_links else self.even_wait_ms  # fp16: half
            run_channel.write_json(run_channel.epoch_report_path(str(self.folder), epoch),
                                   report(epoch, variant, computes, wait))
            verdict = run_channel.wait_for(run_channel.verdict_path(str(self.folder), epoch), timeout=10)
            assert verdict is not None, f"no verdict on epoch {epoch}"
            self.verdicts.append(verdict)
            if verdict["action"] == "switch" and verdict["in_process"] and self.changes:
                variant = verdict["to"]
                run_channel.write_json(run_channel.resumed_path(str(self.folder), epoch + 1),
                                       {"variant": variant, "time": time.time(), "in_process": True})
            elif verdict["action"] == "switch":
                run_channel.write_json(run_channel.state_path(str(self.folder)),
                                       {"epoch": epoch + 1, "status": "saved", "checkpoint": "x"})
                if self.fail:
                    return self.fail
                return self._linger(epoch + 1, finished)
        return 0

    def _linger(self, epochs_done: int, finished) -> int:
        """The chief leaves (its marker); the job's other tasks would take long to end (a straggler's
        teardown): the runner stops them once ``finished()`` says the work is done, and returns 0."""
        assert not finished()
        run_channel.write_json(run_channel.left_path(str(self.folder), epochs_done), {"time": time.time()})
        deadline = time.monotonic() + 10
        while not finished():
            assert time.monotonic() < deadline, "the launcher never said the segment's work was done"
            time.sleep(0.01)
        self.stopped_early += 1
        return 0


def launch(decision, folder: Path, chief: Chief) -> tuple[AdaptiveLaunch, int, list[str]]:
    lines: list[str] = []
    adaptive = AdaptiveLaunch(decision, str(folder), chief, {"USER": "x"}, None, lines.append)
    code = adaptive.run()
    return adaptive, code, lines


def test_a_straggler_switches_the_run_once_and_the_next_plan_resumes(decision, tmp_path):
    folder = tmp_path / "plan.run"
    chief = Chief(folder)
    adaptive, code, lines = launch(decision, folder, chief)
    assert code == 0
    assert [(backend, variant) for backend, variant, _ in chief.segments] == [
        ("horovod", "horovod"), ("parameter_server", "parameter_server")]
    switched = [line for line in lines if line.startswith("tfdist launch: re-planned at epoch ")]
    assert len(switched) == 1 and " horovod -> parameter_server (measured " in switched[0], lines
    phases = re.search(r"switching took ([\d.]+) s: ([\d.]+) s until the old job ended, ([\d.]+) s until the new "
                       r"one had started and restored\)$", switched[0])
    # the old job's stop is inside the total (here a fake job that stops at once: 0.0 s is allowed)
    assert phases and 0 <= float(phases[2]) <= float(phases[1]), switched[0]
    assert abs(float(phases[2]) + float(phases[3]) - float(phases[1])) < 0.15, switched[0]
    assert adaptive.final.backend.name == "parameter_server" and adaptive.final.hosts == decision.requested_hosts
    epochs = [line for line in lines if line.startswith("tfdist launch: epoch ")]
    assert len(epochs) == EPOCHS  # every epoch answered once, across both plans
    assert lines[-1].startswith("tfdist launch: adaptive run: horovod -> parameter_server; ")
    assert (folder / MARKER).exists() and not (folder / "state").exists()
    assert chief.stopped_early == 1  # the old job ended once its chief had left, not when its last task did


def test_a_missing_report_is_skipped_not_waited_on(decision, tmp_path):
    folder = tmp_path / "plan.run"
    chief = Chief(folder, slow_from=EPOCHS, missing=(1,))
    _, code, lines = launch(decision, folder, chief)
    assert code == 0 and len(chief.segments) == 1
    assert [line.split(" on ")[0] for line in lines if line.startswith("tfdist launch: epoch ")] == [
        f"tfdist launch: epoch {e + 1}/{EPOCHS}" for e in range(EPOCHS) if e != 1]


def test_a_segment_that_fails_after_a_switch_verdict_is_not_followed_by_the_next_plan(decision, tmp_path):
    folder = tmp_path / "plan.run"
    chief = Chief(folder, fail=1)
    _, code, lines = launch(decision, folder, chief)
    assert code == 1 and len(chief.segments) == 1
    assert not any("starting parameter_server" in line for line in lines)


def test_a_previous_runs_state_is_never_resumed_and_a_foreign_folder_is_refused(decision, tmp_path):
    folder = tmp_path / "plan.run"
    folder.mkdir()
    (folder / MARKER).touch()
    (folder / "state.json").write_text(json.dumps({"epoch": 5, "status": "saved", "checkpoint": "old"}))
    chief = Chief(folder, slow_from=EPOCHS)
    _, code, _ = launch(decision, folder, chief)
    assert code == 0 and len(chief.segments) == 1  # started at epoch 0: the old state was removed
    foreign = tmp_path / "mine.run"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(RunFolderError, match=r"mine\.run exists and is not an adaptive run's folder.*; fix: "):
        launch(decision, foreign, Chief(foreign))
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_a_verdict_that_cannot_be_computed_keeps_the_plan(decision, tmp_path, monkeypatch):
    folder = tmp_path / "plan.run"
    from tfdist.adapt import replan

    def broken(self, report):
        raise ZeroDivisionError("x")

    monkeypatch.setattr(replan.Replanner, "on_epoch", broken)
    chief = Chief(folder)
    _, code, lines = launch(decision, folder, chief)
    assert code == 0 and len(chief.segments) == 1
    assert any("no verdict (ZeroDivisionError: x); the plan is kept" in line for line in lines)
    assert threading.active_count() >= 1 and os.path.isdir(folder)


def test_slower_links_change_the_compression_in_process_without_a_restart(decision, tmp_path):
    """Issue 36: "a change that needs no new cluster (Horovod's compression) happens in-process"."""
    folder = tmp_path / "plan.run"
    chief = Chief(folder, slow_from=EPOCHS, links_slow_from=3)
    adaptive, code, lines = launch(decision, folder, chief)
    assert code == 0 and len(chief.segments) == 1, lines  # one job: no restart
    switches = [v for v in chief.verdicts if v["action"] == "switch"]
    assert [(v["to"], v["in_process"]) for v in switches] == [("horovod_fp16", True)], lines
    assert switches[0]["plan"]["variant"] == "horovod_fp16"  # what the tasks take, with its prediction
    assert switches[0]["plan"]["options"] == {"compression": "fp16"}
    assert switches[0]["plan"]["predicted_examples_per_second"] > 0
    changed = [line for line in lines if line.startswith("tfdist launch: re-planned at epoch ")]
    assert len(changed) == 1 and " horovod -> horovod_fp16 in process (measured " in changed[0], lines
    assert adaptive.final.advice.variant == "horovod_fp16" and adaptive.planner.current == "horovod_fp16"
    assert adaptive.planner.restart_s is None  # an in-process change says nothing of a restart's cost
    epochs = [line for line in lines if line.startswith("tfdist launch: epoch ")]
    assert len(epochs) == EPOCHS and any(" on horovod_fp16: " in line for line in epochs)
    assert lines[-1].startswith("tfdist launch: adaptive run: horovod -> horovod_fp16; ")


def test_the_end_of_run_re_fit_takes_the_rings_fixed_cost_the_run_measured(decision, tmp_path):
    """The ring's even epochs wait 12 ms a step on 10 Gbit/s links, where the wire takes about 2: the rest
    is Horovod's own cost a step, which the planner measured on the run and weighed fp16 with. The line
    at the end (the final decision's hindsight on the chief's record) re-fits with it too: read as slow
    links, fp16 (half the wire) came out 1.3x faster than the plan the run kept."""
    folder = tmp_path / "plan.run"
    chief = Chief(folder, slow_from=EPOCHS, even_wait_ms=12.0)
    adaptive, code, lines = launch(decision, folder, chief)
    assert code == 0 and len(chief.segments) == 1, lines  # the run kept the ring
    measured = adaptive.planner.ring_overhead_ms
    assert measured is not None and measured > 5, measured
    assert adaptive.final.workload.allreduce_overhead_ms == measured
    record = {"epochs": EPOCHS, "params": 669_706, "batch_size": 64, "worker_epochs": [
        {"epoch": epoch, "workers": report(epoch, "horovod", (10.0, 10.0), 12.0)["workers"]}
        for epoch in range(EPOCHS)]}
    (tmp_path / "measured.json").write_text(json.dumps(record))
    line = adaptive.final.hindsight(str(tmp_path / "measured.json"))
    assert line is not None and line.endswith(": horovod still holds"), line


def test_a_job_that_cannot_change_in_process_restarts_and_later_switches_are_priced_as_restarts(decision, tmp_path):
    folder = tmp_path / "plan.run"
    chief = Chief(folder, slow_from=EPOCHS, links_slow_from=3, changes=False)
    adaptive, code, lines = launch(decision, folder, chief)
    assert code == 0
    assert [variant for _, variant, _ in chief.segments] == ["horovod", "horovod_fp16"], lines
    assert adaptive.planner.in_process == frozenset()
    assert [s.in_process for s in adaptive.switches] == [False]
    assert not any(" in process " in line for line in lines)


def test_a_run_on_a_cluster_without_horovod_never_switches_to_it(monkeypatch, tmp_path):
    """w2 has no Horovod: the run starts on what can launch, and when the links slow down it does not
    switch to Horovod's compression (which it did, and horovodrun would then have failed on w2). The
    fake chief reports per-worker figures for every ring; a real MultiWorkerMirrored job does not yet
    (docs/adaptive.md, "Not covered yet"), so this plays the launcher's candidates, not that job."""
    decision = _decide(monkeypatch, horovod_on_w2=False)
    assert decision.advice.variant == "multi_worker_mirrored" and "horovod" in decision.advice.unavailable
    folder = tmp_path / "plan.run"
    chief = Chief(folder, slow_from=EPOCHS, links_slow_from=3, even_wait_ms=1.0)
    adaptive, code, lines = launch(decision, folder, chief)
    assert code == 0, lines
    ran = [variant for _, variant, _ in chief.segments]
    taken = [verdict["to"] for verdict in chief.verdicts if verdict["action"] == "switch"]
    assert not [name for name in ran + taken if name.startswith("horovod")], lines
    assert not any("-> horovod" in line for line in lines), lines
