"""Keras 3 on a real 2-worker MultiWorkerMirrored job (issue 37, item 4): ``strategy.fit`` and
``evaluate``, which Keras 3 alone cannot run there (keras-team/keras#20585), train as tf-keras does;
the custom loop saves the weights of one process on the global batch; ``strategy.export`` writes the
model; Keras 3's ``BackupAndRestore`` resumes a stopped fit. One job (tests/scripts/mwm_keras3.py)
serves every test here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support import SCRIPTS, subprocess_env

pytestmark = [pytest.mark.cluster, pytest.mark.no_gpu]

TOLERANCE = 1e-5  # float32: the summation order of two replicas' gradients only


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, list[dict]]:
    outdir = tmp_path_factory.mktemp("mwm-keras3")
    (outdir / "tmp").mkdir()  # the job's TMPDIR: a worker's throwaway backup goes there
    tfdist_cli = str(Path(sys.executable).parent / "tfdist")
    result = subprocess.run([tfdist_cli, "launch", "--backend", "multi_worker_mirrored", "--workers", "2", "--",
                             sys.executable, str(SCRIPTS / "mwm_keras3.py"), str(outdir)],
                            capture_output=True, text=True, timeout=400,
                            env={**subprocess_env(), "TMPDIR": str(outdir / "tmp")})
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return outdir, result, [json.loads((outdir / f"worker-{rank}.json").read_text()) for rank in (0, 1)]


def test_keras_3_fit_trains_on_two_workers_as_tf_keras_does(job):
    _, _, workers = job
    for found in workers:
        assert (found["kind"], found["replicas"]) == ("multi_worker_mirrored", 2)
        keras_3, tf_keras = found["keras_3"], found["tf_keras"]
        assert len(keras_3["history"]["loss"]) == 5 and keras_3["history"]["loss"] == sorted(
            keras_3["history"]["loss"], reverse=True)
        assert keras_3["accuracy"] > 0.8, keras_3
        assert abs(keras_3["accuracy"] - tf_keras["accuracy"]) <= 0.01, (keras_3["accuracy"], tf_keras["accuracy"])
        assert keras_3["history"]["loss"] == pytest.approx(tf_keras["history"]["loss"], rel=1e-3)
        assert keras_3["evaluation"]["accuracy"] == pytest.approx(keras_3["accuracy"], abs=1e-6)
    assert workers[0]["keras_3"]["digest"] == workers[1]["keras_3"]["digest"], "the workers' weights differ"
    assert workers[0]["keras_3"]["history"]["loss"] == workers[1]["keras_3"]["history"]["loss"]


def test_keras_3_fit_writes_its_tensorboard_run_and_exports_from_the_chief(job):
    outdir, _, workers = job
    (run,) = [path for path in (outdir / "runs").iterdir() if path.is_dir()]
    assert list((run / "train").glob("events.out.tfevents.*"))
    exported = {found["export"] for found in workers}
    assert exported == {str(outdir / "exports" / "digits" / "1")}
    assert (outdir / "exports" / "digits" / "1" / "saved_model.pb").is_file()


def test_keras_3_loop_on_two_workers_saves_the_weights_of_one_process_on_the_global_batch(job):
    import importlib.util

    import keras

    import tfdist
    from support import REPO

    outdir, _, workers = job
    assert [found["loop"]["tracing"] for found in workers] == [1, 1]
    spec = importlib.util.spec_from_file_location("custom_loop", REPO / "examples" / "custom_loop.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    reference, _, _, _ = example.train(tfdist.make_strategy("single"), keras, 2, 64, 0.2, log=lambda line: None)
    for rank in (0, 1):
        saved = np.load(outdir / f"loop-{rank}.npz")
        errors = [float(np.max(np.abs(saved[f"arr_{i}"] - np.asarray(r))) / np.max(np.abs(np.asarray(r))))
                  for i, r in enumerate(reference.get_weights())]
        assert max(errors) <= TOLERANCE, f"worker {rank}: relative error {max(errors):.2e}"


def test_keras_3s_backup_resumes_a_stopped_fit_as_if_it_had_not_stopped(job):
    """Keras 3's BackupAndRestore has no chief: both workers wrote one h5 file at once (h5py: unable to
    lock file). The chief writes it now, the other worker reads it and writes a throwaway copy."""
    outdir, _, workers = job
    for found in workers:
        assert found["stopped"] == "stopped after epoch 2"
        assert found["backup_after_stop"] == ["latest.weights.h5", "training_metadata.json"]
        resumed = found["resumed"]
        assert resumed["epochs"] == 3 and resumed["max_abs_diff"] == 0.0, resumed  # epochs 3-5, as never stopped
        assert resumed["loss"] == found["keras_3"]["history"]["loss"][2:]
        if found["rank"] == 0:  # the chief removes it as its fit ends, as Keras does (the other worker's
            assert resumed["backup_left"] is False  # fit may return first: what it sees is a race)
    assert not list((outdir / "tmp").glob("tfdist-worker-backup-*")), "a worker's throwaway copy is left"
