"""A switch between plans, task side: the checkpoint a stopped job leaves, and the next plan's
``strategy.fit`` resuming from it, across backends and on both Kerases.

The test plays the launcher: it writes the verdicts into the run folder before the jobs start (the
tasks read each one at its epoch's end). Each job is a real one (``horovodrun``, or ``tfdist launch``'s
parameter-server or MultiWorkerMirrored cluster) running tests/scripts/adaptive_switch.py, whose chief snapshots the weights
and optimizer variables after every epoch and when training begins. After a switch the next job must
begin with exactly the state the last one ended its epoch with (weights, Adam's slots, iterations),
train the next epoch, and every epoch is reported once, by the backend that trained it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import SCRIPTS, horovodrun, subprocess_env

from tfdist import run_channel
from tfdist.plan import Plan, backend_of, plan_environment, variant_options

pytestmark = [pytest.mark.horovod, pytest.mark.cluster]


def plan_env(variant: str, folder: Path, ps: int = 0) -> dict[str, str]:
    """A task's environment under ``variant``'s plan, in the adaptive run ``folder``."""
    plan = Plan(backend=backend_of(variant), variant=variant, options=variant_options(variant), workers=2, ps=ps,
                batch_size=16, predicted_examples_per_second=1000.0, predicted_step_ms=32.0, bottleneck="compute",
                explanation="the workers' compute")
    return subprocess_env(**plan_environment(plan), **{run_channel.ADAPT_ENV: str(folder)})


#: An answer of :func:`verdicts` that the running job takes in-process, as the launcher marks a change
#: of Horovod's compression.
IN_PROCESS = " in process"


def verdicts(folder: Path, *answers: str | None) -> None:
    """The launcher's verdict on each epoch: None to continue, else the variant to switch to (ending in
    IN_PROCESS: in-process, with no plan attached, so the tasks keep the running plan's prediction)."""
    (folder / "state").mkdir(parents=True, exist_ok=True)
    for epoch, target in enumerate(answers):
        verdict = {"action": "continue", "to": None} if target is None else {
            "action": "switch", "to": target.removesuffix(IN_PROCESS), "in_process": target.endswith(IN_PROCESS)}
        (folder / f"verdict-{epoch}.json").write_text(json.dumps(verdict))


def wire(out: Path, epoch: int) -> tuple[str, str, list[str]]:
    """What the chief's strategy object said during ``epoch`` (variant, compression), and the dtypes
    its traced train step allreduced the gradients in."""
    found = json.loads((out / f"wire-{epoch}.json").read_text())
    return found["variant"], found["compression"], found["dtypes"]


def same_state(a: Path, b: Path) -> None:
    with np.load(a) as before, np.load(b) as after:
        assert sorted(before.files) == sorted(after.files), (before.files, after.files)
        for name in before.files:
            np.testing.assert_array_equal(before[name], after[name], err_msg=name)


def reported(folder: Path) -> dict[int, str]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text())["variant"] for p in folder.glob("epoch-*.json")}


def assert_split_per_worker(folder: Path, epoch: int) -> None:
    """The chief's report of ``epoch`` splits each worker's step into compute and communication."""
    workers = json.loads((folder / f"epoch-{epoch}.json").read_text())["workers"]
    assert len(workers) == 2 and all(w["compute_ms"] > 0 and w["communication_ms"] >= 0 for w in workers), workers


def launch_ps(outdir: Path, keras: str, epochs: int, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tfdist", "launch", "--workers", "2", "--ps", "1", "--grace", "2", "--",
               sys.executable, str(SCRIPTS / "adaptive_switch.py"), str(outdir), keras, str(epochs)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def launch_mwm(outdir: Path, keras: str, epochs: int, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tfdist", "launch", "--backend", "multi_worker_mirrored", "--workers", "2",
               "--", sys.executable, str(SCRIPTS / "adaptive_switch.py"), str(outdir), keras, str(epochs)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def test_horovod_to_parameter_servers_to_multi_worker_mirrored_and_back_resumes_the_exact_state(tmp_path):
    """MultiWorkerMirrored runs with PowerSGD (as a plan for a cluster without Horovod has it): its state
    is made by the resumed job and left behind by the next, whose checkpoint has none."""
    folder, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    verdicts(folder, "parameter_server", "multi_worker_mirrored_powersgd", "horovod", "horovod_fp16" + IN_PROCESS,
             None)
    args = (str(out), "tf_keras", "5")

    first = horovodrun("adaptive_switch.py", *args, env=plan_env("horovod", folder))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "DONE" not in first.stdout  # both ranks ended inside strategy.fit, the script's rest unrun
    assert first.stderr.count("switching to parameter_server; this task ends here") == 2, first.stderr[-3000:]
    state = json.loads((folder / "state.json").read_text())
    assert (state["epoch"], state["from"], state["to"], state["status"]) == (1, "horovod", "parameter_server", "saved")
    switched_at = state["wall_time_at"]

    second = launch_ps(out, "tf_keras", 5, plan_env("parameter_server", folder, ps=1))
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed on parameter_server after epoch 1 (model and optimizer restored)" in second.stdout
    same_state(out / "end-0.npz", out / "begin-parameter_server-1.npz")

    mirrored = launch_mwm(out, "tf_keras", 5, plan_env("multi_worker_mirrored_powersgd", folder))
    assert mirrored.returncode == 0, mirrored.stderr[-3000:]
    assert "DONE" not in mirrored.stdout, mirrored.stdout  # both workers stopped for the switch inside fit
    assert (mirrored.stdout + mirrored.stderr).count("switching to horovod; this task ends here") == 2, \
        mirrored.stderr[-3000:]
    assert "resumed on multi_worker_mirrored_powersgd after epoch 2 (model and optimizer restored)" in mirrored.stdout + \
        mirrored.stderr, mirrored.stderr[-3000:]
    same_state(out / "end-1.npz", out / "begin-multi_worker_mirrored-2.npz")
    # the plan's, as the strategy says, and the optimizer aggregates through it
    assert wire(out, 2) == ("multi_worker_mirrored_powersgd", "powersgd", ["powersgd"])
    assert_split_per_worker(folder, 2)  # what the launcher re-fits on, so a run on it can switch away

    third = horovodrun("adaptive_switch.py", *args, "again", env=plan_env("horovod", folder))
    assert third.returncode == 0, third.stderr[-3000:]
    assert third.stdout.count("DONE horovod") == 2, third.stdout
    # a second fit in the same process is not followed: it trains its own epoch from 0, nothing restored
    assert third.stdout.count("AGAIN horovod") == 2 and (out / "begin-horovod-0.npz").exists(), third.stdout
    assert third.stderr.count("only the first strategy.fit of a process is followed") == 2, third.stderr[-3000:]
    same_state(out / "end-2.npz", out / "begin-horovod-3.npz")
    # the compression changed in the running job (tf-keras: Horovod's wrapper), no restart and nothing lost
    assert not (out / "begin-horovod-4.npz").exists()
    assert third.stderr.count("changed to horovod_fp16 in this process after epoch 4") == 2, third.stderr[-3000:]
    assert wire(out, 3) == ("horovod", "none", ["float32"]) and wire(out, 4) == ("horovod_fp16", "fp16", ["float16"])
    assert json.loads((folder / "resumed-4.json").read_text())["in_process"] is True
    assert reported(folder) == {0: "horovod", 1: "parameter_server", 2: "multi_worker_mirrored_powersgd", 3: "horovod",
                                4: "horovod_fp16"}
    with np.load(out / "end-4.npz") as last:  # Adam counted every step once: 5 epochs of 8 steps
        assert int(last["o0"]) == 5 * 8, last["o0"]
    assert all((folder / f"resumed-{epoch}.json").exists() for epoch in (1, 2, 3))
    recorded_segments(out / "runs", json.loads((folder / "resumed-1.json").read_text())["time"] - switched_at)


def recorded_segments(runs: Path, switch_s: float) -> None:
    """The chief's TensorBoard run holds each plan as a segment (issue 36 item 3), read back as
    ``tfdist report`` reads it: its epochs and prediction, and one clock across the three jobs that
    counts the first switch (``switch_s``: from the end of epoch 1 to the resumed job's restore)."""
    from tfdist.report.data import segments
    from tfdist.report.events import load_run
    from tfdist.report.tags import TRAIN, WALL_TIME_TAG

    run = load_run(str(runs / "adaptive"))
    assert [(part.variant, part.first_epoch, part.last_epoch, part.predicted_examples_per_second)
            for part in segments(run)] == [("horovod", 0, 1, 1000.0), ("parameter_server", 1, 2, 1000.0),
                                           ("multi_worker_mirrored_powersgd", 2, 3, 1000.0), ("horovod", 3, 4, 1000.0),
                                           ("horovod_fp16", 4, 5, 1000.0)]
    wall = run.series(TRAIN, WALL_TIME_TAG)
    assert wall.steps == (0, 1, 2, 3, 4), wall
    assert all(b > a for a, b in zip(wall.values, wall.values[1:])), wall.values
    assert wall.values[1] - wall.values[0] >= switch_s > 0, (wall.values, switch_s)


def test_keras_3_changes_the_compression_in_process_then_restarts_for_a_change_it_cannot_make(tmp_path):
    """Keras 3 trains on every backend (under parameter servers on tfdist's loop). A switch from
    the plain ring to fp16 compression happens in the running job (the allreduce in the optimizer's
    ``apply`` reads it at the next trace); hierarchical allreduce is read when Horovod starts, so a switch
    to it restarts the job, even when the launcher asked for an in-process one (the chief says why); the
    switches to MultiWorkerMirrored, then parameter servers, restart it on tf.distribute clusters, and
    the last one goes back to Horovod: every pair of backends, as the tf-keras run above."""
    folder, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    verdicts(folder, "horovod_fp16" + IN_PROCESS, "horovod_hierarchical" + IN_PROCESS, "multi_worker_mirrored",
             "parameter_server", "horovod", None)
    args = (str(out), "keras_3", "6")
    first = horovodrun("adaptive_switch.py", *args, env=plan_env("horovod", folder))
    assert first.returncode == 0 and "DONE" not in first.stdout, first.stderr[-3000:]
    assert first.stderr.count("changed to horovod_fp16 in this process after epoch 1") == 2, first.stderr[-3000:]
    assert "cannot change to horovod_hierarchical in this process (hierarchical_allreduce is read when Horovod " \
           "starts); the job stops and restarts with it" in first.stderr, first.stderr[-3000:]
    assert wire(out, 0) == ("horovod", "none", ["float32"]) and wire(out, 1) == ("horovod_fp16", "fp16", ["float16"])
    assert not (out / "begin-horovod-1.npz").exists()  # no restart for the first change
    second = horovodrun("adaptive_switch.py", *args, env=plan_env("horovod_hierarchical", folder))
    assert second.returncode == 0 and "DONE" not in second.stdout, second.stderr[-3000:]
    same_state(out / "end-1.npz", out / "begin-horovod-2.npz")
    # on to MultiWorkerMirrored, which takes Keras 3 through tfdist (keras-team/keras#20585)
    third = launch_mwm(out, "keras_3", 6, plan_env("multi_worker_mirrored", folder))
    assert third.returncode == 0 and "DONE" not in third.stdout, third.stderr[-3000:]
    same_state(out / "end-2.npz", out / "begin-multi_worker_mirrored-3.npz")
    assert_split_per_worker(folder, 3)
    # and on to parameter servers, where Keras 3's fit runs on tfdist's loop (keras-team/keras#18624)
    fourth = launch_ps(out, "keras_3", 6, plan_env("parameter_server", folder, ps=1))
    assert fourth.returncode == 0 and "DONE" not in fourth.stdout, fourth.stderr[-3000:]
    same_state(out / "end-3.npz", out / "begin-parameter_server-4.npz")
    # and back to the ring from the parameter servers' checkpoint
    fifth = horovodrun("adaptive_switch.py", *args, env=plan_env("horovod", folder))
    assert fifth.returncode == 0 and "DONE horovod" in fifth.stdout, fifth.stderr[-3000:]
    same_state(out / "end-4.npz", out / "begin-horovod-5.npz")
    assert reported(folder) == {0: "horovod", 1: "horovod_fp16", 2: "horovod_hierarchical", 3: "multi_worker_mirrored",
                                4: "parameter_server", 5: "horovod"}
    with np.load(out / "end-5.npz") as last:  # Adam counted every step once: 6 epochs of 8 steps
        assert int(last["o0"]) == 6 * 8, last["o0"]
    # the job's kernels (8 -> 16 -> 1), what the launcher's model counts for PowerSGD
    assert json.loads((folder / "epoch-0.json").read_text())["matrices"] == [[8, 16], [16, 1]]
