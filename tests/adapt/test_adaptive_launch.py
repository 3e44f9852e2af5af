"""The launcher's half of an adaptive run (tfdist/auto/adaptive.py), without TensorFlow: the segments
are played by a fake runner that writes the chief's epoch reports into the run folder and reads the
verdicts, as tfdist.callbacks.adaptive does; the decision comes from a probe faked as in the CLI tests."""
from __future__ import annotations

import json
import os
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


@pytest.fixture
def decision(monkeypatch):
    import tfdist.auto.adaptive

    monkeypatch.setattr(tfdist.auto.adaptive, "WATCH_POLL_S", 0.01)
    def fake(hosts_text, workers, ps, model=None, batch_size=None, **kwargs):
        links = [probe.LinkMeasure(a, b, 10e9, 1e-4) for a, b in probe.ring(["w1", "w2", "p"])]
        return probe.aggregate(parse_hosts(hosts_text), links, steps={"w1": 10.0, "w2": 10.0}, params=669_706,
                               dtype_bytes=4, batch_size=batch_size)

    monkeypatch.setattr(probe, "probe_hosts", fake)
    found = decide(AutoRequest(HostList.parse("w1:1,w2:1,p:1"), ps=1, batch_size=64, model="m:f"))
    assert found.advice.variant == "horovod"  # even workers on 10 Gbit/s links
    return found


def report(epoch: int, variant: str, computes: tuple[float, float] | None) -> dict:
    step_ms = max(computes or (10.0,)) + 2.0
    workers = [] if computes is None else [
        {"compute_ms": c, "communication_ms": step_ms - c, "examples_per_second": 64_000 / step_ms} for c in computes]
    return {"epoch": epoch, "variant": variant, "epochs": EPOCHS, "seconds": 400 * step_ms / 1000,
            "examples_per_second": 128_000 / step_ms, "workers": workers, "params": 669_706, "batch_size": 64,
            "resumable": True, "resume_problem": None, "time": time.time()}


class Chief:
    """Plays the tasks of every segment: reports epochs, waits for each verdict, writes the state on a
    switch and the resumed marker after one. ``slow_from``: the epoch from which w2 computes 4x as long;
    ``missing``: epochs whose report is never written; ``fail``: the exit code of a segment that switched."""

    def __init__(self, folder: Path, slow_from: int = 2, missing: tuple[int, ...] = (), fail: int = 0) -> None:
        self.folder, self.slow_from, self.missing, self.fail = folder, slow_from, missing, fail
        self.segments: list[tuple[str, str, dict]] = []

    def __call__(self, decision, environ) -> int:
        assert environ[run_channel.ADAPT_ENV] == str(self.folder)
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
            run_channel.write_json(run_channel.epoch_report_path(str(self.folder), epoch),
                                   report(epoch, variant, computes))
            verdict = run_channel.wait_for(run_channel.verdict_path(str(self.folder), epoch), timeout=10)
            assert verdict is not None, f"no verdict on epoch {epoch}"
            if verdict["action"] == "switch":
                run_channel.write_json(run_channel.state_path(str(self.folder)),
                                       {"epoch": epoch + 1, "status": "saved", "checkpoint": "x"})
                return self.fail
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
    assert adaptive.final.backend.name == "parameter_server" and adaptive.final.hosts == decision.requested_hosts
    epochs = [line for line in lines if line.startswith("tfdist launch: epoch ")]
    assert len(epochs) == EPOCHS  # every epoch answered once, across both plans
    assert lines[-1].startswith("tfdist launch: adaptive run: horovod -> parameter_server; ")
    assert (folder / MARKER).exists() and not (folder / "state").exists()


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
