"""benchmarks/procs.py (compare.py's runner) without TensorFlow: a run's exit code and output, the
deadline, a parameter-server cluster of plain processes, and nothing left afterwards, also what left
its group; the teardown is tfdist.launch.processes' (the one place), never the benchmarks' own."""
from __future__ import annotations

import ast
import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from support import REPO, load_script

from tfdist.launch.processes import marked_pids

BENCHMARKS = REPO / "benchmarks"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="procs.py reads /proc")
# a task that leaves a grandchild in a session of its own (as horovodrun's ranks are), then waits
_ESCAPE = "setsid sleep 600 & sleep 600"


@pytest.fixture(scope="module")
def procs():
    return load_script(BENCHMARKS / "procs.py", "tfdist_bench_procs")


@pytest.fixture
def mark():
    """A variable only this test's processes carry, to look for what they left."""
    return {"TFDIST_TEST_PROCS": uuid.uuid4().hex}


def _left(mark) -> list[int]:
    (name, token), = mark.items()
    return marked_pids(name, token)


def test_a_run_keeps_its_exit_code_and_output(procs, mark):
    result = procs.run(["sh", "-c", "echo hello; exit 3"], {**os.environ, **mark}, timeout=60)
    assert (result.returncode, result.ok, result.output, result.note) == (3, False, "hello\n", "")


def test_a_run_past_its_deadline_is_stopped_with_all_it_started(procs, mark):
    result = procs.run(["sh", "-c", _ESCAPE], {**os.environ, **mark}, timeout=1)
    assert (result.returncode, result.note) == (None, "timed out after 1s")
    assert _left(mark) == []


def test_a_ps_cluster_ends_when_its_chief_does_and_leaves_nothing(procs, mark):
    task = ("import json, os, subprocess, sys, time; c = json.loads(os.environ['TF_CONFIG']); "
            "t = c['task']['type']; print(t, len(c['cluster']['worker']), len(c['cluster']['ps']), flush=True); "
            f"sys.exit(0) if t == 'chief' else (subprocess.Popen(['sh', '-c', {_ESCAPE!r}]), time.sleep(600))")
    result = procs.run_ps_cluster([sys.executable, "-c", task], {**os.environ, **mark}, timeout=120,
                                  workers=2, ps=1)
    assert (result.returncode, result.note, result.output) == (0, "", "chief 2 1\n")
    assert _left(mark) == []


def test_the_benchmarks_leave_process_teardown_to_tfdist():
    """No benchmark signals process groups itself: tfdist.launch.processes stops them."""
    offenders = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "killpg":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_cluster_ports_come_from_tfdist(procs):
    from tfdist.cluster.spec import free_ports

    assert procs.free_ports is free_ports


@pytest.fixture(scope="module")
def network():
    sys.path.insert(0, str(BENCHMARKS))  # network.py imports its sibling table.py
    try:
        spec = importlib.util.spec_from_file_location("tfdist_bench_network", BENCHMARKS / "network.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def _state(pid: int, wanted: str) -> str:
    """The process's state letter once it is one of `wanted` (signals arrive asynchronously), or after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
        if state in wanted or time.monotonic() > deadline:
            return state
        time.sleep(0.02)


def test_a_network_job_is_parked_resumed_and_stopped_with_all_it_started(network, tmp_path):
    """benchmarks/network.py's Job without the lab: a stand-in launcher (its own session) whose
    training process left the group; park stops only the training process, stop ends everything."""
    job = network.Job("ps1", "parameter_server", 1, "small", tmp_path)
    script = tmp_path / "network_job.py"
    script.write_text("import time\ntime.sleep(600)\n")
    launcher = (f"setsid {sys.executable} {script} & "
                "trap 'exit 0' TERM; while :; do sleep 0.1; done")  # ignores "quit"; TERM spares the escaped one
    job.process = subprocess.Popen(["sh", "-c", launcher], start_new_session=True,
                                           env={**os.environ, network.MARKER: job.token})
    try:
        deadline = time.monotonic() + 30
        while not job.training_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        (training,) = job.training_pids()
        job.park()
        assert _state(training, "T") == "T"
        job.resume()
        assert _state(training, "RSD") in "RSD"
        job.stop(timeout=0.2)
        assert job.process.returncode == 0  # TERM reached the launcher's group
        assert marked_pids(network.MARKER, job.token) == []
    finally:
        if job.process.poll() is None:
            job.process.kill()
        for pid in marked_pids(network.MARKER, job.token):
            os.kill(pid, signal.SIGKILL)
