"""SLURM for real on lab hosts: slurmctld on h0, a slurmd on each of h1, h2, h3 (tfdist.testing.slurmlab).

One lab and one SLURM cluster serve every test of this file (module scope: the daemons start once).

* ``sbatch`` of the script ``tfdist tf-config --format sbatch`` writes trains a parameter-server job
  (chief, ps, worker) across the three nodes to completion, each task's TF_CONFIG computed from
  SLURM's own variables (the node list ``h[1-3]`` expanded);
* ``scancel`` mid-run ends the job: its tasks and their children are gone from every host;
* after each test only the daemons and sshd are left on the hosts.
"""
from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from doc_pages import blocks, text
from support import REPO, SCRIPTS, invoke, subprocess_env

from tfdist.cluster.spec import free_ports
from tfdist.testing.netlab import Lab
from tfdist.testing.slurmlab import SlurmLab

pytestmark = pytest.mark.cluster  # a parameter-server cluster of real processes

JOB_TIMEOUT = 420  # a hung job fails its test instead of hanging the suite (generous: a loaded machine)
LEFTOVER_TIMEOUT = 60
NODES = ("h1", "h2", "h3")

# Each task records its pid and its child's on its host, then waits (for scancel to end it).
SLEEPER = ("import json, os, socket, subprocess, sys, time\n"
           "child = subprocess.Popen(['sleep', '600'])\n"
           "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
           "path = os.path.join(sys.argv[1], '%s-%d.json' % (task['type'], task['index']))\n"
           "with open(path + '.tmp', 'w') as f:\n"
           "    json.dump({'host': socket.gethostname(), 'pids': [os.getpid(), child.pid]}, f)\n"
           "os.rename(path + '.tmp', path)\n"
           "time.sleep(600)\n")


@pytest.fixture(scope="module")
def slurm():
    with Lab(["h0", *NODES]) as lab, SlurmLab(lab, "h0", NODES) as cluster:
        yield cluster


@pytest.fixture
def clean(slurm):
    """After the test, only sshd and the SLURM daemons are left on every host."""
    yield
    left = _leftovers(slurm, LEFTOVER_TIMEOUT)
    assert not any(left.values()), f"processes left on the hosts after the job: {left}"


def _leftovers(slurm: SlurmLab, timeout: float) -> dict[str, list[str]]:
    daemons = set(slurm.daemon_pids().values())
    deadline = time.monotonic() + timeout
    while True:
        left = {host: [p for p in slurm.lab.task_processes(host) if int(p.split(":")[0]) not in daemons]
                for host in slurm.lab.hosts}
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _batch_script(tmp_path: Path, port: int, command: str) -> Path:
    """The script ``tfdist tf-config --format sbatch`` prints for a chief, one ps and one worker."""
    result = invoke("tf-config", "--format", "sbatch", "--workers", "1", "--ps-count", "1", "--with-chief",
                    "--port", str(port), "--sbatch-command", command)
    assert result.exit_code == 0, result.output
    script = tmp_path / "job.sbatch"
    script.write_text(result.stdout)
    return script


def _submit(slurm: SlurmLab, script: Path, tmp_path: Path) -> int:
    return slurm.sbatch(script, f"--output={tmp_path}/slurm-%j.out", f"--chdir={tmp_path}",
                        env=subprocess_env(), cwd=tmp_path)


def _output(tmp_path: Path, job: int) -> str:
    path = tmp_path / f"slurm-{job}.out"
    return path.read_text(errors="replace")[-4000:] if path.exists() else "(no output file)"


def test_sbatch_trains_a_parameter_server_job_across_three_nodes(slurm, clean, tmp_path):
    assert slurm.nodes == NODES
    outdir = tmp_path / "out"
    (port,) = free_ports(1)
    script = _batch_script(tmp_path, port, f"{sys.executable} {SCRIPTS / 'ps_train.py'} plain {outdir}")
    job = _submit(slurm, script, tmp_path)
    state = slurm.wait_job(job, JOB_TIMEOUT)
    assert state == "COMPLETED", f"job {job} ended {state}:\n{_output(tmp_path, job)}"
    shown = slurm.run(["scontrol", "show", "job", str(job)]).stdout
    assert " NodeList=h[1-3]" in shown and "NumTasks=3" in shown
    result = json.loads((outdir / "chief.json").read_text())
    assert (result["kind"], result["num_workers"], result["num_ps"]) == ("parameter_server", 1, 1)
    assert result["loss"][-1] < 0.2 * result["loss"][0]
    assert all(device.startswith("/job:ps/replica:0/task:0") for device in result["embedding_devices"])
    assert sorted(p.name for p in (outdir / "pids").iterdir()) == ["chief-0", "ps-0", "worker-0"]


def test_scancel_mid_run_leaves_nothing_on_any_host(slurm, clean, tmp_path):
    outdir = tmp_path / "out"
    outdir.mkdir()
    (port,) = free_ports(1)
    script = _batch_script(tmp_path, port, shlex.join([sys.executable, "-c", SLEEPER, str(outdir)]))
    job = _submit(slurm, script, tmp_path)
    deadline = time.monotonic() + JOB_TIMEOUT
    while len(list(outdir.glob("*.json"))) < 3:
        assert slurm.job_state(job) in ("PENDING", "CONFIGURING", "RUNNING"), _output(tmp_path, job)
        assert time.monotonic() < deadline, f"the tasks did not start:\n{_output(tmp_path, job)}"
        time.sleep(0.2)
    tasks = {path.stem: json.loads(path.read_text()) for path in outdir.glob("*.json")}
    # one task per node, in SLURM's order: task 0 (chief) on h1, task 1 (ps) on h2, task 2 (worker) on h3
    assert {name: task["host"] for name, task in tasks.items()} == {"chief-0": "h1", "ps-0": "h2",
                                                                   "worker-0": "h3"}
    assert slurm.job_state(job) == "RUNNING"
    slurm.run(["scancel", str(job)])
    assert slurm.wait_job(job, 120) == "CANCELLED"
    pids = [pid for task in tasks.values() for pid in task["pids"]]
    deadline = time.monotonic() + LEFTOVER_TIMEOUT
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in pids if _running(pid)] == [], "a task or its child outlived scancel"


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: this machine's init may not reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _horovod_script(tmp_path: Path, slurm: SlurmLab, command: list[str]) -> Path:
    """docs/slurm.md's Horovod batch script, run as the page shows it: the lab's ssh port and key added
    (as on a cluster whose sshd is not on port 22), the test's script as the command."""
    block = next(b for b in blocks(text(REPO / "docs" / "slurm.md"), "bash") if "horovodrun" in b)
    shown = "--gloo python train.py"
    assert block.count(shown) == 1, block
    ssh = f"-p {slurm.lab.ssh_port} -i {slurm.lab.identity_file}"
    script = tmp_path / "horovod.sbatch"
    script.write_text(block.replace(shown, f"--gloo {ssh} {shlex.join(command)}"))
    return script


@pytest.mark.horovod
def test_horovod_in_an_allocation_of_two_nodes_ends_with_identical_weights(slurm, clean, tmp_path):
    """horovodrun inside a 2-node allocation, its -H from SLURM_JOB_NODELIST: one rank per node, both
    ranks end with the same weights, equal to one process with the doubled batch."""
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, str(SCRIPTS / "hvd_train.py"), "lazy", str(out), "functional"]
    script = _horovod_script(tmp_path, slurm, command)
    job = _submit(slurm, script, tmp_path)
    state = slurm.wait_job(job, JOB_TIMEOUT)
    assert state == "COMPLETED", f"job {job} ended {state}:\n{_output(tmp_path, job)}"
    assert " NodeList=h[1-2]" in slurm.run(["scontrol", "show", "job", str(job)]).stdout
    rank0, rank1 = (json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1))
    for start0, start1 in zip(rank0["initial"], rank1["initial"], strict=True):
        np.testing.assert_array_equal(np.array(start0), np.array(start1))
    for distributed, other, reference in zip(rank0["distributed"], rank1["distributed"], rank0["reference"],
                                             strict=True):
        distributed, reference = np.array(distributed), np.array(reference)
        np.testing.assert_array_equal(distributed, np.array(other))
        error = np.linalg.norm(distributed - reference) / max(np.linalg.norm(reference), 1e-12)
        assert error <= 1e-5, f"relative error {error:.2e}"
