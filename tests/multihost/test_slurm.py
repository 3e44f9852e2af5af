"""SLURM for real on lab hosts: slurmctld on h0, a slurmd on each of h1, h2, h3 (tfdist.testing.slurmlab).

One lab and one SLURM cluster serve every test of this file (module scope: the daemons start once).

* ``sbatch`` of the script ``tfdist tf-config --format sbatch`` writes trains a parameter-server job
  (chief, ps, worker) across the three nodes to completion, each task's TF_CONFIG computed from
  SLURM's own variables (the node list ``h[1-3]`` expanded);
* ``scancel`` mid-run ends the job: its tasks and their children are gone from every host;
* several tasks per node (4 on 3 nodes), and the node holding only a worker cut mid-run: the chief
  finishes every epoch, the job ends COMPLETED once SLURM has declared the node down (the script's
  ``--no-kill``); the node is restored and resumed;
* Horovod in a 2-node allocation (docs/slurm.md's script): exact maths; ``scancel`` leaves no rank on
  any host; the second node cut mid-run ends the job non-zero in bounded time;
* after each test only the daemons and sshd are left on the hosts.

Each fault test prints the time from the fault to the job's reaction.
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
from tfdist.testing.slurmlab import FINAL_STATES, SlurmLab

pytestmark = pytest.mark.cluster  # a parameter-server cluster of real processes

JOB_TIMEOUT = 420  # a hung job fails its test instead of hanging the suite (generous: a loaded machine)
LEFTOVER_TIMEOUT = 60
#: s the hosts get to be empty: of every task after each test (the ``clean`` fixture), and of SLURM's
#: step daemons too at the module's end (the ``slurm`` fixture). After a node cut the step's slurmstepd
#: on the cut node outlives its task: SLURM 22.05 retries its step-completion message to slurmctld once
#: a minute (slurmd-h3.log: 'failed sending step completion message directly to slurmctld, retrying',
#: sent 60 s later, then 'done with job'; src/slurmd/slurmstepd/mgr.c sleeps 60 s between tries),
#: measured 53-60 s after the restore. The tests after it run meanwhile; the module's end waits for it.
CLEAN_TIMEOUT = 120
#: the command line of SLURM's per-step daemon (``slurmstepd: [JOB.STEP]``)
STEP_DAEMON = "slurmstepd:"
NODES = ("h1", "h2", "h3")
#: s a Gloo collective waits for a lost peer before it fails (Horovod's default: 30)
GLOO_TIMEOUT = "10"
#: gRPC keepalives of 3 s (TensorFlow's TF_GRPC_DEFAULT_OPTIONS): the chief's RPCs to a cut node fail
#: in seconds, so it hands that worker's steps to the others sooner (as in test_launch_hosts.py)
FAST_KEEPALIVE = {"TF_GRPC_DEFAULT_OPTIONS": "grpc.keepalive_time_ms=3000,grpc.keepalive_timeout_ms=3000"}

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
    """The lab's SLURM; at the module's end, before it closes, only sshd and the SLURM daemons may be
    left on any host: no task, and no step daemon either (see CLEAN_TIMEOUT)."""
    with Lab(["h0", *NODES]) as lab, SlurmLab(lab, "h0", NODES) as cluster:
        yield cluster
        left = _leftovers(cluster, CLEAN_TIMEOUT, step_daemons=True)
        assert not any(left.values()), f"processes left on the hosts at the end of the SLURM tests: {left}"


@pytest.fixture
def clean(slurm):
    """After the test, no process of its jobs is left on any host: only sshd, the SLURM daemons and
    (for the module's end to check) a step daemon still reporting to slurmctld after a node cut."""
    yield
    left = _leftovers(slurm, CLEAN_TIMEOUT, step_daemons=False)
    assert not any(left.values()), f"processes left on the hosts after the job: {left}"


def _leftovers(slurm: SlurmLab, timeout: float, *, step_daemons: bool) -> dict[str, list[str]]:
    """What runs on each host beyond sshd and the SLURM daemons (and, unless ``step_daemons``, beyond
    slurmstepd), once it is nothing or ``timeout`` s passed."""
    daemons = set(slurm.daemon_pids().values())

    def counted(process: str) -> bool:
        pid, command = process.split(":", 1)
        return int(pid) not in daemons and (step_daemons or not command.strip().startswith(STEP_DAEMON))

    deadline = time.monotonic() + timeout
    while True:
        left = {host: [p for p in slurm.lab.task_processes(host) if counted(p)] for host in slurm.lab.hosts}
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _batch_script(tmp_path: Path, port: int, command: str, workers: int = 1, *options: str) -> Path:
    """The script ``tfdist tf-config --format sbatch`` prints for a chief, one ps and ``workers``
    workers (``options`` such as ``--sbatch-nodes 3`` added)."""
    result = invoke("tf-config", "--format", "sbatch", "--workers", str(workers), "--ps-count", "1",
                    "--with-chief", "--port", str(port), "--sbatch-command", command, *options)
    assert result.exit_code == 0, result.output
    script = tmp_path / "job.sbatch"
    script.write_text(result.stdout)
    return script


def _submit(slurm: SlurmLab, script: Path, tmp_path: Path, **env: str) -> int:
    return slurm.sbatch(script, f"--output={tmp_path}/slurm-%j.out", f"--chdir={tmp_path}",
                        env=subprocess_env(**env), cwd=tmp_path)


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


def _still_running(slurm: SlurmLab, host: str, marker: str, timeout: float) -> list[str]:
    """The processes on ``host`` whose command line has ``marker``, once none is left or ``timeout``
    seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        left = [line for line in slurm.lab.task_processes(host) if marker in line]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _epochs(outdir: Path) -> list[tuple[int, float]]:
    """The chief's finished epochs (ps_train.py's epochs.txt): ``[(epoch, loss), ...]``."""
    path = outdir / "epochs.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(epoch), float(loss)) for epoch, loss in (line.split() for line in lines)]


def test_a_worker_node_cut_mid_run_the_parameter_server_job_finishes(slurm, clean, tmp_path, request):
    """A chief, one ps and two workers on three nodes (h1 holds two tasks); h3, which holds only
    worker 1, is cut after the chief's first epoch and stays cut until the job ends. The chief trains
    every epoch with worker 0; the batch script's --no-kill keeps SLURM from ending (and requeueing)
    the job when it declares h3 down (SlurmdTimeout), after which srun and the job end COMPLETED."""
    outdir, where = tmp_path / "out", tmp_path / "where"
    (port,) = free_ports(1)
    command = shlex.join([sys.executable, str(SCRIPTS / "slurm_where.py"), str(where), sys.executable,
                          str(SCRIPTS / "ps_train.py"), "plain", str(outdir)])
    script = _batch_script(tmp_path, port, command, 2, "--sbatch-nodes", "3")
    assert "#SBATCH --nodes=3\n#SBATCH --ntasks=4\n" in script.read_text()
    job = _submit(slurm, script, tmp_path, **FAST_KEEPALIVE)
    deadline = time.monotonic() + JOB_TIMEOUT
    while not _epochs(outdir):  # the chief has trained an epoch with both workers
        assert slurm.job_state(job) in ("PENDING", "CONFIGURING", "RUNNING"), _output(tmp_path, job)
        assert time.monotonic() < deadline, f"no epoch finished:\n{_output(tmp_path, job)}"
        time.sleep(0.2)
    tasks = {path.stem: json.loads(path.read_text()) for path in where.glob("*.json")}
    # SLURM's block placement of 4 tasks on 3 nodes: 2,1,1 (SLURM_TASKS_PER_NODE=2,1(x2))
    assert {name: (t["host"], t["procid"], t["nodeid"]) for name, t in tasks.items()} == {
        "chief-0": ("h1", 0, 0), "ps-0": ("h1", 1, 0), "worker-0": ("h2", 2, 1), "worker-1": ("h3", 3, 2)}
    cluster = {"chief": [f"h1:{port}"], "ps": [f"h1:{port + 1}"], "worker": [f"h2:{port}", f"h3:{port}"]}
    assert all(t["tf_config"]["cluster"] == cluster for t in tasks.values()), tasks  # h1's two: 2 ports
    request.addfinalizer(lambda: slurm.resume(["h3"]))  # after the restore below, pass or fail
    slurm.lab.cut("h3")
    cut = time.monotonic()
    try:
        while len(_epochs(outdir)) < 4 and slurm.job_state(job) == "RUNNING":
            assert time.monotonic() < cut + JOB_TIMEOUT, f"the chief hangs without h3:\n{_output(tmp_path, job)}"
            time.sleep(0.2)
        trained = time.monotonic()
        state = slurm.wait_job(job, JOB_TIMEOUT, FINAL_STATES | {"PENDING"})  # PENDING again: requeued
        ended = time.monotonic()
        h3 = slurm.node_states().get("h3")
    finally:
        slurm.lab.restore("h3")
        slurm.run(["scancel", str(job)], check=False)  # a requeued job must not start again later
    print(f"\nSLURM worker node cut: the chief's last epoch {trained - cut:.1f} s after the cut, the job "
          f"{state} {ended - cut:.1f} s after it, h3 {h3}")
    output = _output(tmp_path, job)
    assert state == "COMPLETED", f"job {job} ended {state}:\n{output}"
    assert h3 == "down*", "the job ended before SLURM declared the cut node down"
    assert "srun: error: Node failure on h3" in output, output
    result = json.loads((outdir / "chief.json").read_text())
    assert (result["kind"], result["num_workers"], result["num_ps"]) == ("parameter_server", 2, 1)
    assert [epoch for epoch, _ in _epochs(outdir)] == result["epochs"] == [0, 1, 2, 3]
    assert result["loss"][-1] < result["loss"][0]
    # the finalizer returns h3 to service: its slurmd ends what the job left there, every node idle


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


def _records(path: Path) -> list[dict]:
    """hvd_elastic.py's JSON lines (one per rank and finished epoch)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def _start_horovod(slurm: SlurmLab, tmp_path: Path, *args: str, **env: str) -> tuple[int, Path]:
    """docs/slurm.md's Horovod script running hvd_elastic.py (static) for many 1 s epochs; returns
    once both ranks have finished an epoch: the job id and the epochs file."""
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, str(SCRIPTS / "hvd_elastic.py"), str(out), "--static", "--epochs", "300",
               "--epoch-seconds", "1", *args]
    job = _submit(slurm, _horovod_script(tmp_path, slurm, command), tmp_path, **env)
    epochs = out / "epochs.jsonl"
    deadline = time.monotonic() + JOB_TIMEOUT
    while {r["host"] for r in _records(epochs)} < {"h1", "h2"}:
        assert slurm.job_state(job) in ("PENDING", "CONFIGURING", "RUNNING"), _output(tmp_path, job)
        assert time.monotonic() < deadline, f"no epoch on h1 and h2:\n{_output(tmp_path, job)}"
        time.sleep(0.2)
    return job, epochs


@pytest.mark.horovod
def test_scancel_of_a_horovod_job_leaves_nothing_on_any_host(slurm, tmp_path):
    """scancel signals the batch step (horovodrun and its ssh clients on h1); the rank on h2 runs
    under sshd, outside the job's steps. A rank that never prints (--quiet) must still end there."""
    job, epochs = _start_horovod(slurm, tmp_path, "--quiet")
    ranks = {r["host"]: r["pid"] for r in _records(epochs)}
    assert _running(ranks["h2"]), "the rank on h2 is not running before scancel"
    slurm.run(["scancel", str(job)])
    cancelled = time.monotonic()
    assert slurm.wait_job(job, 120) == "CANCELLED"
    left = _leftovers(slurm, LEFTOVER_TIMEOUT, step_daemons=False)  # steps: at the module's end
    gone = time.monotonic() - cancelled
    print(f"\nSLURM scancel of Horovod: hosts empty {gone:.1f} s after scancel")
    assert not any(left.values()), f"processes left on the hosts after scancel: {left}"
    assert not any(_running(pid) for pid in ranks.values())
    assert max(r["epoch"] for r in _records(epochs)) < 299


@pytest.mark.horovod
def test_a_node_cut_mid_run_ends_a_horovod_job_non_zero_in_bounded_time(slurm, clean, tmp_path, request):
    """h2 (rank 1's node) cut mid-training: rank 0's next allreduce fails after Gloo's timeout
    (HOROVOD_GLOO_TIMEOUT_SECONDS, set short as users can), horovodrun ends non-zero, and with it
    the batch script: the job fails instead of hanging. SLURM cannot reach h2 to end the job there, so
    the job stays COMPLETING until h2 is back."""
    job, epochs = _start_horovod(slurm, tmp_path, HOROVOD_GLOO_TIMEOUT_SECONDS=GLOO_TIMEOUT)
    request.addfinalizer(lambda: slurm.resume(["h2"]))  # after the restore below, pass or fail
    slurm.lab.cut("h2")
    cut = time.monotonic()
    try:
        # PENDING: killed and requeued by SLURM (the node declared down first), not failed by Horovod
        state = slurm.wait_job(job, JOB_TIMEOUT, FINAL_STATES | {"COMPLETING", "PENDING"})
        ended = time.monotonic()
        shown = slurm.run(["scontrol", "show", "job", str(job)]).stdout
        # h2 is still cut off: horovodrun and rank 0 are gone from h1 (horovodrun stopped them), and
        # rank 1 (under sshd, outside SLURM) ends on h2 by itself, its collective failing on the lost peer
        first_left = _still_running(slurm, "h1", str(tmp_path), LEFTOVER_TIMEOUT)
        rank_left = _still_running(slurm, "h2", str(tmp_path), LEFTOVER_TIMEOUT)
        rank_gone = time.monotonic()
    finally:
        slurm.lab.restore("h2")
        if slurm.job_state(job) == "PENDING":
            slurm.run(["scancel", str(job)], check=False)  # a requeued job must not start again later
    print(f"\nSLURM Horovod node cut: the job {state} {ended - cut:.1f} s after the cut; the rank on the cut h2 "
          f"gone {rank_gone - cut:.1f} s after it (first checked when the job had ended)")
    assert first_left == [], f"left on h1 with h2 still cut, {LEFTOVER_TIMEOUT} s after the job ended"
    assert rank_left == [], f"the rank on the cut h2 still runs {LEFTOVER_TIMEOUT} s after the job ended"
    assert ended - cut < 300, "the job took minutes to fail after losing a rank"  # only a hang breaks this
    assert state in ("FAILED", "COMPLETING") and " ExitCode=0:0" not in shown, shown
    assert slurm.wait_job(job, 120) == "FAILED", _output(tmp_path, job)
    assert max(r["epoch"] for r in _records(epochs)) < 299
