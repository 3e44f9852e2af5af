"""The examples' jobs that tests share: tests/examples/test_examples.py runs every example under every
`--strategy` value it offers, and tests/report/test_real_runs.py reads the TensorBoard runs of three of
those cases (``REPORTED``), as `make demo` trains them.

The cases that start the same kind of job (launcher and backend: one plain process of the single or of
the mirrored backend, a horovodrun job or a parameter-server cluster) share one: tests/scripts/
run_examples.py runs each case's example in turn in the same processes, as ``python examples/X.py ARGS``
would, and each test reads its own case's exit status and output. The tf-keras cases run first, then
the Keras 3 ones. Under multi_worker_mirrored a job trains once (a second MultiWorkerMirroredStrategy's
collectives fail in the same workers): one training case has the shared cluster, the other cases have
their own.

Both test files are one unit of work (``scheduling.SHARED_UNITS``), so the session's ``shared_run``
(tests/conftest.py) starts each job once for both.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import pytest

from support import REPO, SCRIPTS, horovodrun, subprocess_env

EXAMPLES = REPO / "examples"
TIMEOUT = 900  # seconds; 2 cores shared with other jobs, so generous

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
    demo = (strategy, launcher) == ("horovod", "horovodrun")  # the export `make demo` serves
    epochs = "2" if Case("classifier", strategy, launcher) in REPORTED.values() else "1"
    return ["--strategy", strategy, "--epochs", epochs, "--batch-size", "32", "--logdir", str(where / "runs"),
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


def shared_jobs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Case], tuple[subprocess.CompletedProcess, Path]]:
    """``shared(case)``: the case's run (its exit status and output) and its own directory, from the
    one job of its group, started on the first case asked for and run for every case of the group (the
    session's ``shared_run`` fixture)."""
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


# parameter_server: Keras 3's fit runs on tfdist's loop (tfdist/strategies/keras3_parameter_server.py);
# multi_worker_mirrored trains Keras 3 (tests/strategies/test_keras3_multi_worker.py): its shared job trains once
KERAS_3 = [_case(strategy, LAUNCH[strategy], strategy)
           for strategy in ("horovod", "single", "mirrored", "parameter_server")]


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



# the runs tests/report/test_real_runs.py reads: the backends `make demo` trains (scripts/demo.sh: horovodrun,
# then `tfdist launch --workers 2 --ps 1`, neither with --strategy: auto) and one plain process, each for 2
# epochs (so "epochs 2.." exists); the other classifier cases train 1
REPORTED = {"single": Case("classifier", "single", "python"),
            "horovod": Case("classifier", "auto", "horovodrun"),
            "parameter_server": Case("classifier", "auto", "ps")}
