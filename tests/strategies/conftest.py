"""The Horovod jobs this folder's tests share: one ``horovodrun -np 2`` job per value of what
``tf.keras`` is runs every scenario of every Keras that starts that way, one after the other, each in
its own folder (``tests/scripts/hvd_train.py kerases``), so TensorFlow and Horovod start once, not
once per scenario. Each test reads the part it checks; a part's job runs the first time one is asked for.

The ``resume`` part is the rerun of a job that failed on purpose: before a job with that part, its
first run (``hvd_train.py resume``, rank 1 failing as epoch 2 begins) runs alone, in the same folder,
and ``jobs.first_run(...)`` gives its result; the shared job then resumes it as that Keras's last part.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from support import horovodrun

_LAZY = [f"lazy/{kind}" for kind in ("sequential", "subclassed", "functional")]
#: (the Keras of the models, what tf.keras is) -> the parts of its job
HOROVOD_PARTS: dict[tuple[str, str], list[str]] = {
    ("tf_keras", "tf_keras"): ["train", *_LAZY, "equivalence", "raw", "resume"],
    ("keras_3", "tf_keras"): ["train", *_LAZY, "raw", "resume"],
    ("keras_3", "keras_3"): ["equivalence"],
    ("tf_keras", "keras_3"): ["equivalence"],
}


def _keys_of_job(tf_keras_is: str) -> list[tuple[str, str]]:
    """The (Keras, tf.keras) keys one job runs: all that share what ``tf.keras`` is, in table order."""
    return [key for key in HOROVOD_PARTS if key[1] == tf_keras_is]


class HorovodJobs:
    """``jobs(keras, tf_keras_is, part)``: both ranks' ``rank<N>.json`` of ``part``;
    ``jobs.outdir(...)``: its folder. One job per value of tf.keras (``hvd_train.py kerases``) runs
    the parts of every Keras, one Keras after the other."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._done: dict[str, Path] = {}  # tf_keras_is -> the job's folder
        self._results: dict[str, subprocess.CompletedProcess | subprocess.TimeoutExpired] = {}
        self._first_runs: dict[tuple[str, str], tuple[subprocess.CompletedProcess, float] | Exception] = {}

    def _run(self, key: tuple[str, str], part: str) -> None:
        """Run the job of ``key`` (after the first runs of its ``resume`` parts) unless it ran."""
        assert part in HOROVOD_PARTS.get(key, []), f"{part!r} is no part of the {key} job: add it to HOROVOD_PARTS"
        tf_keras_is = key[1]
        if tf_keras_is not in self._done:
            outdir = self._tmp.mktemp(f"horovod-tf.keras-is-{tf_keras_is}")
            env = {"TF_USE_LEGACY_KERAS": "1" if tf_keras_is == "tf_keras" else "0"}
            groups = []
            for keras, _ in _keys_of_job(tf_keras_is):
                parts = list(HOROVOD_PARTS[(keras, tf_keras_is)])
                if "resume" in parts:  # its first run, alone: it must fail, quickly
                    (outdir / keras / "resume").mkdir(parents=True)
                    try:
                        first = horovodrun("hvd_train.py", "resume", str(outdir / keras / "resume"), np=2,
                                           timeout=180, env={**env, "TFDIST_TEST_KERAS": keras})
                        self._first_runs[(keras, tf_keras_is)] = first, time.time()
                    except subprocess.TimeoutExpired as hung:  # fails the resume test alone: no rerun
                        self._first_runs[(keras, tf_keras_is)] = hung
                        parts.remove("resume")
                groups.append(f"{keras}={','.join(parts)}")
            try:
                self._results[tf_keras_is] = horovodrun("hvd_train.py", "kerases", str(outdir), *groups, np=2,
                                                        timeout=900, env=env)
            except subprocess.TimeoutExpired as hung:  # kept, so the job is not started again per test
                self._results[tf_keras_is] = hung
            self._done[tf_keras_is] = outdir

    def outdir(self, keras: str, tf_keras_is: str, part: str) -> Path:
        self._run((keras, tf_keras_is), part)
        result = self._results[tf_keras_is]  # a failed job fails every test of it, and runs once
        if isinstance(result, subprocess.TimeoutExpired):
            raise result
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return self._done[tf_keras_is] / keras / part.replace("/", "-")

    def first_run(self, keras: str, tf_keras_is: str) -> tuple[subprocess.CompletedProcess, float]:
        """The ``resume`` part's first run: its result and the time it ended (it runs before the job)."""
        self._run((keras, tf_keras_is), "resume")
        first = self._first_runs[(keras, tf_keras_is)]
        if isinstance(first, Exception):
            raise first
        return first

    def __call__(self, keras: str, tf_keras_is: str, part: str) -> list[dict]:
        outdir = self.outdir(keras, tf_keras_is, part)
        return [json.loads((outdir / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="session")
def horovod_jobs(tmp_path_factory) -> HorovodJobs:
    return HorovodJobs(tmp_path_factory)
