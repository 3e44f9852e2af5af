"""Smoke tests for examples/: every example under every `--strategy` value it offers, each started
by the launcher that value needs, with the smallest settings that still train.

A run passes on what it prints and writes, not on having exited: exactly one RESULT line (the chief
prints it), the backend and worker count it names, a test accuracy above chance and a loss below
it, throughput figures that add up, TensorBoard event files and checkpoints on disk.

The cases and the jobs they share are in tests/example_jobs.py (the fixture ``shared_run``).
"""
from __future__ import annotations

import importlib.util
import math
import re
import subprocess
from pathlib import Path

import pytest
from example_jobs import (
    AUTO_UNDER_LAUNCHERS,
    EVERY_STRATEGY,
    EXAMPLES,
    KERAS_3,
    LAUNCH,
    MWMS_TRAINING_CASE,
    PORTING,
    SHARED_CASES,
    SHARED_LAUNCHERS,
    SYNTHETIC_ITERS,
    TIMEOUT,
    Case,
    expected,
    run_case,
)

from support import REPO, subprocess_env

CHANCE_LOSS = math.log(10)  # cross-entropy of a uniform guess over the 10 digit classes


def result_line(run: subprocess.CompletedProcess) -> dict[str, str]:
    """The fields of the one ``RESULT k=v ...`` line, whatever prefix the launcher puts before it."""
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"exit {run.returncode}\n{output[-6000:]}"
    lines = re.findall(r"RESULT (.*)$", run.stdout, flags=re.MULTILINE)
    assert len(lines) == 1, f"expected one RESULT line (from the chief only), got {lines}\n{output[-3000:]}"
    return dict(field.split("=", 1) for field in lines[0].split())


def assert_trained(result: dict[str, str], backend: str, workers: int) -> None:
    assert (result["strategy"], int(result["workers"])) == (backend, workers)
    accuracy, loss = float(result["test_accuracy"]), float(result["test_loss"])
    assert 0.3 < accuracy <= 1.0, f"test accuracy {accuracy}: no better than chance (0.1) after training"
    assert loss < 0.9 * CHANCE_LOSS, f"test loss {loss} is not below chance ({CHANCE_LOSS:.2f})"


def assert_served_by_the_demo(result: dict, export: Path) -> None:
    """`classifier.py --export DIR`: one export, named on the RESULT line; then the demo's own serving
    step (`scripts/demo.sh serve DIR`, TensorFlow's saved_model_cli) serves a test digit from it and
    prints the prediction."""
    assert result["export"] == str(export)
    assert sorted(p.name for p in export.parent.iterdir()) == ["1"]  # one export, no temporary sibling left
    served = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh"), "serve", str(export)], capture_output=True,
                            text=True, timeout=TIMEOUT, env=subprocess_env(), cwd=REPO)
    assert served.returncode == 0, served.stdout[-3000:] + served.stderr[-3000:]
    line = served.stdout.strip().splitlines()[-1]
    match = re.fullmatch(rf"Served by saved_model_cli from {re.escape(str(export))}: predicted digit (\d) "
                         r"\(label (\d)\); logits \[.*\]", line)
    assert match, served.stdout


@pytest.mark.parametrize("strategy, launcher", EVERY_STRATEGY + AUTO_UNDER_LAUNCHERS)
def test_classifier(strategy, launcher, shared_run, tmp_path):
    """Every backend trains and logs; under horovodrun with ``--export`` (what `make demo` runs) it also
    exports once, and the demo's serving step serves a digit from that export."""
    backend, workers = expected(strategy, launcher)
    demo = (strategy, launcher) == ("horovod", "horovodrun")
    run, where = run_case(Case("classifier", strategy, launcher), shared_run, tmp_path)
    export = where / "exports" / "classifier" / "1"
    result = result_line(run)
    assert_trained(result, backend, workers)
    if demo:
        assert_served_by_the_demo(result, export)
    assert float(result["examples_per_second"]) > 0
    run_dir = Path(result["logdir"])
    assert run_dir.parent == where / "runs"
    assert list((run_dir / "train").glob("events.out.tfevents.*")), f"no TensorBoard events in {run_dir}"
    assert result["time_to_target_s"] == "not-reached" or float(result["time_to_target_s"]) > 0
    # every task that ran the callbacks sampled itself; Horovod's per-worker figures reach the chief's run
    tasks = {"horovod": ["rank0", "rank1"], "parameter_server": ["chief"]}.get(backend)
    if tasks is not None:
        assert sorted(p.name for p in (run_dir / "system").iterdir()) == tasks
    if backend == "horovod":
        from tensorboard.backend.event_processing import event_accumulator

        train = event_accumulator.EventAccumulator(str(run_dir / "train"), size_guidance={"tensors": 0})
        train.Reload()
        tags = set(train.Tags()["tensors"])
        assert {"epoch_worker/0/step_time_ms", "epoch_worker/1/step_time_ms", "epoch_comm_share"} <= tags


@pytest.mark.parametrize("strategy, launcher", KERAS_3)
def test_classifier_with_keras_3(strategy, launcher, shared_run, tmp_path):
    """In its backend's shared job after the tf-keras cases (their process has imported tf_keras: a
    script may use both packages)."""
    backend, workers = expected(strategy, launcher)
    run, _ = run_case(Case("classifier_keras_3", strategy, launcher), shared_run, tmp_path)
    result = result_line(run)
    assert result["keras"] == "3"
    assert_trained(result, backend, workers)
    assert list((Path(result["logdir"]) / "train").glob("events.out.tfevents.*"))
    if backend == "parameter_server":  # fit on tfdist's loop: the coordinator's figures per worker reach the run
        from tensorboard.backend.event_processing import event_accumulator

        train = event_accumulator.EventAccumulator(str(Path(result["logdir"]) / "train"),
                                                   size_guidance={"tensors": 0})
        train.Reload()
        tags = set(train.Tags()["tensors"])
        assert {"epoch_worker/0/steps", "epoch_worker/1/steps", "epoch_accuracy"} <= tags, sorted(tags)


@pytest.mark.parametrize("strategy, launcher", EVERY_STRATEGY)
def test_synthetic_benchmark(strategy, launcher, shared_run, tmp_path):
    backend, workers = expected(strategy, launcher)
    iters = SYNTHETIC_ITERS
    run, where = run_case(Case("synthetic_benchmark", strategy, launcher), shared_run, tmp_path)
    result = result_line(run)
    assert (result["strategy"], int(result["workers"])) == (backend, workers)
    total, per_worker = float(result["images_per_second"]), float(result["per_worker"])
    assert total > 0 and per_worker > 0
    assert total == pytest.approx(per_worker * workers, abs=0.1 * workers)  # both printed to 0.1
    assert len(re.findall(r"Iter #\d+: [\d.]+ img/sec per worker", run.stdout)) == iters
    assert list((where / "runs").glob("*/train/events.out.tfevents.*")), "no TensorBoard events"


@pytest.mark.slow
@pytest.mark.parametrize("launcher, backend, replicas", PORTING)
def test_porting_from_horovod(launcher, backend, replicas, shared_run, tmp_path):
    run, where = run_case(Case("porting", "auto", launcher), shared_run, tmp_path)
    result = result_line(run)
    assert_trained(result, backend, replicas)
    # Adam(0.001) scaled once by strategy.optimizer(): 0.001 per replica, not 0.001 * size**2.
    assert float(result["learning_rate"]) == pytest.approx(0.001 * replicas)
    assert sorted(p.name for p in (where / "checkpoints").iterdir()) == [
        f"checkpoint-{epoch}.h5" for epoch in (1, 2, 3)]


def test_every_strategy_the_examples_offer_has_a_launch():
    import tfdist

    assert sorted(LAUNCH) == sorted(tfdist.available_strategies())


def test_every_keras_3_case_runs_last_in_its_shared_job_and_mwms_jobs_train_once():
    """Every Keras 3 case is a case of its launcher's shared job, after every tf-keras case of it; the
    mwms job trains once (one MultiWorkerMirroredStrategy that runs collectives per worker), so its
    Keras 3 cases run in a job of their own (tests/strategies/test_keras3_multi_worker.py)."""
    keras_3 = {"classifier_keras_3"}
    wanted = {Case("classifier_keras_3", *param.values) for param in KERAS_3}
    assert {case for case in SHARED_CASES if case.example in keras_3} == wanted
    assert {case.launcher for case in wanted} == set(SHARED_LAUNCHERS) - {"mwms"}
    assert [case for case in SHARED_CASES if case.launcher == "mwms"] == [MWMS_TRAINING_CASE]
    for group in {case.group for case in SHARED_CASES}:
        flavours = [case.example in keras_3 for case in SHARED_CASES if case.group == group]
        assert flavours == sorted(flavours), (group, flavours)  # no tf-keras case after a Keras 3 one


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines main(); runs nothing
    return module


@pytest.mark.parametrize("name, flag", [("classifier", ["--warmup-epochs", "2"]),
                                        ("synthetic_benchmark", ["--fp16-allreduce"])])
@pytest.mark.parametrize("strategy", ["single", "mirrored", "parameter_server", "multi_worker_mirrored"])
def test_horovod_only_flags_are_refused_with_another_backend(name, flag, strategy, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _load_example(name).main(["--strategy", strategy, *flag])
    assert exit_info.value.code == 2
    assert f"{flag[0]} is a Horovod option; --strategy {strategy}" in capsys.readouterr().err


@pytest.mark.parametrize("strategy", ["auto", "horovod", "single", "parameter_server"])
def test_options_reach_only_their_backend(strategy):
    import tfdist

    options = tfdist.options_for(strategy, {"horovod": {"warmup_epochs": 2.0}})
    assert options == ({"warmup_epochs": 2.0} if strategy in ("auto", "horovod") else {})


def test_readme_porting_code_is_the_example():
    """Every line of docs/horovod.md's tfdist code under "Porting from Horovod" is a line of the example."""
    readme = (REPO / "docs" / "horovod.md").read_text()
    section = readme.split("\n## Porting from Horovod\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert blocks, "no python code block in docs/horovod.md's Porting from Horovod section"
    example = {line.strip() for line in (EXAMPLES / "porting_from_horovod.py").read_text().splitlines()}
    code = [line.strip() for line in blocks[-1].splitlines() if line.strip() and "..." not in line]
    assert len(code) >= 10
    assert [line for line in code if line not in example] == []
