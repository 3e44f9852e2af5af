"""Smoke tests for examples/: every example under every `--strategy` value it offers, each started
by the launcher that value needs, with the smallest settings that still train.

A run passes on what it prints and writes, not on having exited: exactly one RESULT line (the chief
prints it), the backend and worker count it names, a test accuracy above chance and a loss below
it, throughput figures that add up, TensorBoard event files and checkpoints on disk.

The cases that start the same kind of job (launcher and backend: one plain process of the single or
of the mirrored backend, a horovodrun job or a parameter-server cluster) share one:
tests/scripts/run_examples.py runs each case's example in turn in the same processes, as ``python
examples/X.py ARGS`` would, and each test reads its own case's exit status and output. The tf-keras
cases run first, then the Keras 3 ones. Under multi_worker_mirrored a job trains once (a second
MultiWorkerMirroredStrategy's collectives fail in the same workers): one training case has the shared
cluster, the other cases have their own.
"""
from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import pytest

from support import REPO, SCRIPTS, horovodrun, subprocess_env

EXAMPLES = REPO / "examples"
TIMEOUT = 900  # seconds; 2 cores shared with other jobs, so generous
CHANCE_LOSS = math.log(10)  # cross-entropy of a uniform guess over the 10 digit classes

# launcher -> (the backend `auto` picks under it, the workers it starts)
LAUNCHERS = {
    "python": ("single", 1),                 # one plain process
    "horovodrun": ("horovod", 2),            # horovodrun -np 2 -H localhost:2 --gloo
    "ps": ("parameter_server", 2),           # tfdist launch --workers 2 --ps 1
    "mwms": ("multi_worker_mirrored", 2),    # tfdist launch --backend multi_worker_mirrored --workers 2
}
# every --strategy value the examples offer -> the launcher it needs (mirrored: one CPU replica)
LAUNCH = {"single": "python", "auto": "python", "mirrored": "python", "horovod": "horovodrun",
          "parameter_server": "ps", "multi_worker_mirrored": "mwms"}
_MARKS = {"python": (), "horovodrun": (pytest.mark.horovod,), "ps": (pytest.mark.cluster,),
          "mwms": (pytest.mark.cluster,)}


def _case(strategy: str, launcher: str, name: str):
    marks = [pytest.mark.slow, *_MARKS[launcher]]
    if (strategy, launcher) == ("auto", "python"):
        marks.append(pytest.mark.no_gpu)  # expects single; auto picks mirrored with several GPUs
    return pytest.param(strategy, launcher, marks=marks, id=name)


EVERY_STRATEGY = [_case(strategy, launcher, strategy) for strategy, launcher in LAUNCH.items()]
# `auto` under each launcher too: what `make demo` and the README's commands run
AUTO_UNDER_LAUNCHERS = [_case("auto", launcher, f"auto-{launcher}")
                        for launcher in ("horovodrun", "ps", "mwms")]


def expected(strategy: str, launcher: str) -> tuple[str, int]:
    """The backend and worker count the RESULT line must report."""
    backend, workers = LAUNCHERS[launcher]
    return (backend if strategy == "auto" else strategy), workers


def _launch(path: str, launcher: str, *args: str) -> subprocess.CompletedProcess:
    """``PATH ARGS`` (a Python script) as one process, a 2-rank horovodrun job, or a local cluster."""
    if launcher == "horovodrun":
        # support.horovodrun joins its argument to tests/scripts/; an absolute path replaces it. The
        # horovodrun script itself: README.md's and docs/horovod.md's lines, which users type.
        return horovodrun(path, *args, np=2, timeout=TIMEOUT, binary=True)
    tfdist_cli = str(Path(sys.executable).parent / "tfdist")
    prefix = {
        "python": [],
        "ps": [tfdist_cli, "launch", "--workers", "2", "--ps", "1", "--"],
        "mwms": [tfdist_cli, "launch", "--backend", "multi_worker_mirrored", "--workers", "2", "--"],
    }[launcher]
    return subprocess.run([*prefix, sys.executable, path, *args], capture_output=True, text=True,
                          timeout=TIMEOUT, env=subprocess_env(), cwd=REPO)


def run_example(script: str, launcher: str, *args: str) -> subprocess.CompletedProcess:
    """``examples/<script> ARGS`` as one process, a 2-rank horovodrun job, or a local cluster."""
    return _launch(str(EXAMPLES / script), launcher, *args)


# --- shared jobs ----------------------------------------------------------------------------------------
# launcher -> the tasks that run every case of a shared job (under parameter servers the chief: the
# servers serve inside the first case's make_strategy until the chief is gone).
SHARED_LAUNCHERS = {"python": 1, "horovodrun": 2, "ps": 1, "mwms": 2}
# the one case that trains in the mwms shared job: a second MultiWorkerMirroredStrategy in the same workers
# fails once it runs collectives (their instance keys clash with the first's), so it is the job's only case;
# the other mwms cases have their own clusters
MWMS_TRAINING_CASE = ("classifier", "multi_worker_mirrored", "mwms")


def _classifier_args(strategy: str, launcher: str, where: Path) -> list[str]:
    where.mkdir(parents=True, exist_ok=True)
    demo = (strategy, launcher) == ("horovod", "horovodrun")  # what `make demo` runs: with --export
    return ["--strategy", strategy, "--epochs", "1", "--batch-size", "32", "--logdir", str(where / "runs"),
            *(["--export", str(where / "exports" / "classifier" / "1")] if demo else [])]


SYNTHETIC_ITERS = 2


def _synthetic_args(strategy: str, launcher: str, where: Path) -> list[str]:
    where.mkdir(parents=True, exist_ok=True)
    return ["--strategy", strategy, "--image-size", "8", "--batch-size", "8", "--num-warmup-batches", "1",
            "--num-batches-per-iter", "2", "--num-iters", str(SYNTHETIC_ITERS), "--logdir", str(where / "runs")]


def _porting_args(strategy: str, launcher: str, where: Path) -> list[str]:
    # Horovod's batch 128 and 3-epoch warm-up: 3 epochs (6 steps each on 2 ranks) is what trains.
    (where / "checkpoints").mkdir(parents=True, exist_ok=True)
    return ["--epochs", "3", "--checkpoint-dir", str(where / "checkpoints")]


def _keras_3_args(strategy: str, launcher: str, where: Path) -> list[str]:
    where.mkdir(parents=True, exist_ok=True)
    return ["--keras", "3", "--strategy", strategy, "--epochs", "1", "--batch-size", "32",
            "--logdir", str(where / "runs")]


_ARGS: dict[str, tuple[str, Callable[[str, str, Path], list[str]]]] = {
    "classifier": ("classifier.py", _classifier_args), "synthetic_benchmark": ("synthetic_benchmark.py", _synthetic_args),
    "porting": ("porting_from_horovod.py", _porting_args), "classifier_keras_3": ("classifier.py", _keras_3_args)}


class Case(NamedTuple):
    """One run of an example (the porting example takes no --strategy: its strategy is "auto")."""

    example: str
    strategy: str
    launcher: str

    @property
    def name(self) -> str:
        return "-".join(self)

    @property
    def group(self) -> tuple[str, str]:
        """The job it shares: its launcher and the backend it trains on."""
        return self.launcher, expected(self.strategy, self.launcher)[0]


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory) -> Callable[[Case], tuple[subprocess.CompletedProcess, Path]]:
    """``shared_run(case)``: the case's run (its exit status and output) and its own directory, from the
    one job of its group, started on the first case asked for and run for every case of the group."""
    jobs: dict[tuple[str, str], tuple[subprocess.CompletedProcess | subprocess.TimeoutExpired, Path]] = {}

    def shared(case: Case) -> tuple[subprocess.CompletedProcess, Path]:
        if case.group not in jobs:
            root = tmp_path_factory.mktemp(f"examples-{'-'.join(case.group)}")
            members = [c for c in SHARED_CASES if c.group == case.group]
            spec = [[c.name, str(EXAMPLES / _ARGS[c.example][0]), _ARGS[c.example][1](c.strategy, c.launcher,
                                                                                      root / c.name)]
                    for c in members]
            try:
                job = _launch(str(SCRIPTS / "run_examples.py"), case.launcher, str(root), json.dumps(spec))
            except subprocess.TimeoutExpired as exc:  # every case of the job fails with it, none waits again
                job = exc
            jobs[case.group] = job, root
        job, root = jobs[case.group]
        if isinstance(job, subprocess.TimeoutExpired):
            raise job
        return _case_run(job, root / case.name, SHARED_LAUNCHERS[case.launcher]), root / case.name

    return shared


def _case_run(job: subprocess.CompletedProcess, where: Path, finishing: int) -> subprocess.CompletedProcess:
    """One case of a shared job as if it had been its own run: the job's status if the job failed, else
    the case's worst task status (-1 unless ``finishing`` tasks finished it); the case's stdout and stderr
    over every task that ran it (the job's own output after them)."""
    statuses = [int(path.read_text()) for path in sorted(where.glob("task-*.rc"))]
    returncode = job.returncode or (max(statuses, key=abs) if len(statuses) == finishing else -1)
    read = lambda suffix: "".join(path.read_text() for path in sorted(where.glob(f"task-*{suffix}")))  # noqa: E731
    return subprocess.CompletedProcess(job.args, returncode, read(".out"),
                                       read(".err") + job.stdout[-3000:] + job.stderr[-3000:])


def run_case(case: Case, shared_run, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """The case's run and the directory its arguments name: from its shared job, or its own."""
    if case in SHARED_CASES:
        return shared_run(case)
    script, args = _ARGS[case.example]
    return run_example(script, case.launcher, *args(case.strategy, case.launcher, tmp_path)), tmp_path


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


# parameter_server: Keras 3's fit runs on tfdist's loop (tfdist/strategies/keras3_parameter_server.py);
# multi_worker_mirrored trains Keras 3 (tests/strategies/test_keras3_multi_worker.py): its shared job trains once
KERAS_3 = [_case(strategy, LAUNCH[strategy], strategy)
           for strategy in ("horovod", "single", "mirrored", "parameter_server")]


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


PORTING = [
    pytest.param("python", "single", 1, marks=pytest.mark.no_gpu, id="single-process"),  # auto: single
    pytest.param("horovodrun", "horovod", 2, marks=pytest.mark.horovod, id="horovodrun-np2"),
]
# the cases run by a shared job (shared_run): those of test_classifier, test_synthetic_benchmark,
# test_porting_from_horovod and the Keras 3 tests whose launcher runs several in one job (under mwms only
# MWMS_TRAINING_CASE); each job runs its Keras 3 cases last (the tf-keras cases run as in
# a process that never imported Keras 3)
_RUNS = [Case(example, *param.values) for example, params in (
    ("classifier", EVERY_STRATEGY + AUTO_UNDER_LAUNCHERS), ("synthetic_benchmark", EVERY_STRATEGY),
    ("classifier_keras_3", KERAS_3)) for param in params]
_RUNS += [Case("porting", "auto", param.values[0]) for param in PORTING]
SHARED_CASES = sorted((case for case in _RUNS if case.launcher in SHARED_LAUNCHERS and (
    case.launcher != "mwms" or case == MWMS_TRAINING_CASE)),
    key=lambda case: case.example.startswith("classifier_keras_3"))  # stable: Keras 3 last, else as listed


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
