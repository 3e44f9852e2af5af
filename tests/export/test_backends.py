"""strategy.export on real jobs of every backend (tests/scripts/export_job.py), one job per backend
shared by every assertion: a 2-rank horovodrun job (tf-keras and Keras 3), a local gRPC
parameter-server cluster with shards=2, two MultiWorkerMirrored workers, and the single and
mirrored backends in one process, which is then SIGKILLed in the middle of an overwrite."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import SCRIPTS, horovodrun, process_gone, subprocess_env
from tfdist.export import paths

TIMEOUT = 600  # seconds: 2 loaded cores; a bound against hangs, not a speed limit
INITIAL = ["file.txt", "taken", "taken/saved_model.pb"]
# backend -> the exports its job writes (relative to EXPORTS), every one verified by the job
EXPORTS = {"horovod": ["horovod/1", "horovod-keras3/1"], "mwms": ["mwms/1", "mwms-bn/1"], "ps": ["ps/1", "ps.keras"],
           "local": ["single/1", "single.keras", "mirrored/1"]}
TASKS = {"horovod": 2, "mwms": 2, "ps": 1, "local": 1}
BACKENDS = [pytest.param("horovod", marks=pytest.mark.horovod), pytest.param("mwms", marks=pytest.mark.cluster),
            pytest.param("ps", marks=pytest.mark.cluster), pytest.param("local", marks=pytest.mark.slow)]


@dataclass(frozen=True)
class Job:
    exports: Path
    results: Path
    reports: list[dict]
    output: str


def _dirs(tmp_path_factory, name: str) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp(f"export-{name}")
    exports, results = root / "exports", root / "results"
    (exports / "taken").mkdir(parents=True)
    (exports / "taken" / "saved_model.pb").write_text("an export already there")
    (exports / "file.txt").write_text("a file where a directory would be")
    results.mkdir()
    return exports, results


def _job(backend: str, exports: Path, results: Path, run: subprocess.CompletedProcess | None, output: str = "") -> Job:
    if run is not None:
        output = run.stdout + run.stderr
        assert run.returncode == 0, output[-5000:]
    reports = [json.loads(path.read_text()) for path in sorted(results.glob(f"{backend}-*.json"))]
    assert len(reports) == TASKS[backend], output[-5000:]
    return Job(exports, results, reports, output)


def _python(*args: str, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    env = subprocess_env(**({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env)


@pytest.fixture(scope="module")
def horovod_job(tmp_path_factory) -> Job:
    exports, results = _dirs(tmp_path_factory, "horovod")
    run = horovodrun("export_job.py", "horovod", str(exports), str(results), timeout=TIMEOUT)
    return _job("horovod", exports, results, run)


@pytest.fixture(scope="module")
def mwms_job(tmp_path_factory) -> Job:
    exports, results = _dirs(tmp_path_factory, "mwms")
    scratch = exports.parent / "tmp"  # the workers' throwaway copies go to TMPDIR
    scratch.mkdir()
    run = _python("-m", "tfdist", "launch", "--backend", "multi_worker_mirrored", "--workers", "2", "--",
                  sys.executable, str(SCRIPTS / "export_job.py"), "mwms", str(exports), str(results), tmpdir=scratch)
    left = [p.name for p in scratch.iterdir() if not p.name.startswith("__autograph_generated_file")]
    assert left == [], f"a worker's throwaway copy was left behind: {left}"  # (TensorFlow's autograph files aside)
    return _job("mwms", exports, results, run)


@pytest.fixture(scope="module")
def ps_job(tmp_path_factory) -> Job:
    exports, results = _dirs(tmp_path_factory, "ps")
    run = _python(str(SCRIPTS / "export_job.py"), "ps", str(exports), str(results))
    return _job("ps", exports, results, run)


@pytest.fixture(scope="module")
def local_job(tmp_path_factory) -> Job:
    """The single and mirrored exports, then an overwrite of single/1 SIGKILLed once its new copy is
    written and before it is renamed into place (the job waits there: deterministic)."""
    exports, results = _dirs(tmp_path_factory, "local")
    log = exports.parent / "local.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, str(SCRIPTS / "export_job.py"), "local", str(exports),
                                    str(results)], stdout=out, stderr=subprocess.STDOUT, env=subprocess_env())
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (results / "paused").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (results / "paused").exists(), log.read_text()[-5000:]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process_gone(process.pid)
    return _job("local", exports, results, None, log.read_text())


def _walk(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_task_returns_the_path_and_only_the_exports_are_written(backend, request):
    job = request.getfixturevalue(f"{backend}_job")
    expected = [str(job.exports / name) for name in EXPORTS[backend]]
    assert [report["paths"] for report in job.reports] == [expected] * TASKS[backend]
    tops = sorted({name.split("/")[0] for name in EXPORTS[backend]})
    assert sorted(p.name for p in job.exports.iterdir()) == sorted(["file.txt", "taken", *tops])
    hidden = [name for name in _walk(job.exports) if Path(name).name.startswith(".")]
    # the killed overwrite's copy is the only leftover (test_a_task_killed_during_export...)
    assert hidden == ([f"single/{Path(json.loads((job.results / 'paused').read_text())['written']).parent.name}"]
                      if backend == "local" else [])
    # a MultiWorkerMirrored worker saves too (collectives), into a throwaway copy outside, then removed
    copies = {"mwms": [{"complete": True, "outside": True}] * len(EXPORTS[backend])}.get(backend)
    assert [report.get("throwaway") for report in job.reports] == \
        [None if report["is_chief"] else copies for report in job.reports]
    for name in EXPORTS[backend]:
        if name.endswith(".keras"):
            assert (job.exports / name).is_file()
        else:
            assert (job.exports / name / "saved_model.pb").is_file()


_CASES = {  # case -> what the task that decides (the chief, or every task) says
    "existing": "already exists; fix: pass overwrite=True to replace the export there, or another path",
    "unwritable": "file.txt' is not a directory); fix: pick a path under a directory",
    "format": "`format` must be one of ['saved_model', 'keras'], got 'onnx'; fix: ",
    "not_built": "is not built (it has no weights yet), so there is nothing to export; fix: ",
    "subclassed": "fix: pass input_signature=[tf.TensorSpec((None, ...), tf.float32)]",
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_bad_input_fails_on_every_task_before_anything_is_written(backend, request):
    job = request.getfixturevalue(f"{backend}_job")
    for report in job.reports:
        assert [case["case"] for case in report["errors"]] == list(_CASES)
        for case in report["errors"]:
            error, what = case["error"], case["case"]
            assert error is not None, (backend, report["rank"], what)
            assert case["listing"] == INITIAL, (backend, what, case["listing"])
            expected = _CASES[what] if (backend, what) != ("ps", "subclassed") else \
                "is a subclassed model, which tfdist cannot copy out of the parameter servers"
            if report["is_chief"] or what not in ("existing", "unwritable"):
                assert expected in error and error.count("; fix: ") == 1, (backend, what, error)
            else:  # the path is the chief's to check: the others fail with its error, not a hang
                assert error.startswith("ExportError: another task failed the export's checks: "), error
                if backend == "horovod":
                    assert _CASES[what] in error, error


_FRESH = r"""
import json, sys
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
found = {}
for path, npz in json.loads(sys.argv[1]):
    with np.load(npz) as data:
        sample, predictions = data["sample"], data["predictions"]
    if path.endswith(".keras"):
        import tf_keras
        got = tf_keras.models.load_model(path, compile=False)(sample, training=False).numpy()
        ops = []
    else:
        serve = tf.saved_model.load(path).signatures["serving_default"]
        (name,) = serve.structured_input_signature[1]
        got = serve(**{name: tf.constant(sample)})["output_0"].numpy()
        proto = saved_model_pb2.SavedModel()
        with open(path + "/saved_model.pb", "rb") as f:
            proto.ParseFromString(f.read())
        ops = sorted({node.op for graph in proto.meta_graphs for function in graph.graph_def.library.function
                      for node in function.node_def} | {node.op for graph in proto.meta_graphs
                                                        for node in graph.graph_def.node})
    found[path] = {"diff": float(np.max(np.abs(got - predictions))), "ops": ops}
print(json.dumps({"exports": found, "modules": sorted(m for m in sys.modules
                                                     if m.split(".")[0] in ("tfdist", "horovod"))}))
"""


@pytest.mark.horovod
@pytest.mark.cluster
def test_the_exports_load_where_neither_tfdist_nor_horovod_is_imported_and_give_the_predictions(
        horovod_job, mwms_job, ps_job, local_job):
    """One fresh interpreter (python -I) loads every export of every backend, after the kill too."""
    jobs = {"horovod": horovod_job, "mwms": mwms_job, "ps": ps_job, "local": local_job}
    pairs = [(str(job.exports / name), str(job.results / (name.replace("/", "_") + ".npz")))
             for backend, job in jobs.items() for name in EXPORTS[backend]]
    run = subprocess.run([sys.executable, "-I", "-c", _FRESH, json.dumps(pairs)], capture_output=True, text=True,
                         timeout=TIMEOUT, env=subprocess_env())
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["modules"] == []
    assert sorted(result["exports"]) == sorted(path for path, _ in pairs)
    for path, found in result["exports"].items():
        assert found["diff"] <= 1e-5, (path, found["diff"])
        assert not [op for op in found["ops"] if "horovod" in op.lower()], (path, found["ops"])


@pytest.mark.cluster
def test_the_parameter_server_model_was_sharded(ps_job):
    assert ps_job.reports[0]["sharded"] == "ShardedVariable"


@pytest.mark.slow
def test_a_task_killed_during_export_leaves_the_previous_export_intact(local_job, tmp_path):
    """The overwrite was killed with its new copy complete but not renamed: the previous export is
    still at the path (the fresh-interpreter test serves it and gets the first export's predictions),
    and the next export's sweep removes the copy, which belonged to a process that is gone."""
    written = Path(json.loads((local_job.results / "paused").read_text())["written"])
    target = local_job.exports / "single" / "1"
    assert (written / "saved_model.pb").is_file() and (target / "saved_model.pb").is_file()
    assert paths.siblings(str(target)) == [str(written.parent)]
    copy = tmp_path / "single"
    shutil.copytree(local_job.exports / "single", copy)
    assert paths.sweep(str(copy / "1")) == [str(copy / written.parent.name)]
    assert sorted(p.name for p in copy.iterdir()) == ["1"]
    assert os.listdir(copy / "1") == os.listdir(target)
