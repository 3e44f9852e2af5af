"""The parameter-server backend on real gRPC clusters on localhost, started by `tfdist launch`."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import SCRIPTS, subprocess_env

pytestmark = pytest.mark.cluster


def launch(mode: str, outdir: Path, *options: str, timeout: float = 300,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`tfdist launch OPTIONS -- python ps_train.py MODE OUTDIR`, output captured."""
    command = [sys.executable, "-m", "tfdist", "launch", *options, "--",
               sys.executable, str(SCRIPTS / "ps_train.py"), mode, str(outdir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env or subprocess_env())


def users_env() -> dict[str, str]:
    """``subprocess_env()`` without ``TF_CPP_MIN_LOG_LEVEL``, which the suite sets and a user outside
    ``make`` usually does not: TensorFlow then logs at its default level (INFO)."""
    env = subprocess_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL")
    return env


#: TensorFlow's C++ INFO lines of a server that starts and of each connection to it: 22 lines per
#: server and connection (the ``SessionOptions`` dump), before tfdist left them out (issue 34)
SERVER_CHATTER = ("SessionOptions", "Creating sync eager service context", "Started server with target")


def epochs(outdir: Path) -> list[tuple[int, float]]:
    lines = (outdir / "epochs.txt").read_text().split()
    return [(int(lines[i]), float(lines[i + 1])) for i in range(0, len(lines), 2)]


def leftover_processes(outdir: Path) -> list[str]:
    """Processes whose command line names this test's output directory."""
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if str(outdir) in line and "ps -eo" not in line]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, dict]:
    outdir = tmp_path_factory.mktemp("ps-sharded")
    result = launch("sharded", outdir, "--workers", "2", "--ps", "2", "--evaluator", env=users_env())
    assert result.returncode == 0, result.stdout[-4000:]
    return outdir, result, json.loads((outdir / "chief.json").read_text())


def test_a_chief_restarted_alone_finds_the_servers_and_resumes(restart_alone, request):
    """Servers used to leave 5 s after the chief died, so a chief restarted on its own (what an
    orchestrator's OnFailure does) found nobody; now they wait chief_grace_seconds (60 s) for it.

    Nothing here races the clock: the restarted chief is started first and imports TensorFlow while
    the first one trains (start-up under load took more than the grace); the first kills itself only
    once that import is done (``restart.ready``), and the restarted one joins when the test gives the
    start signal (``restart``), after a back-off longer than the old 5 s grace. What is left between
    the signal and its joining is a connection, seconds against the 50 s of grace left.

    The module's first test: the servers' 60 s of grace after the restarted chief has gone pass while
    the other tests run, and the last test checks that they then left by themselves."""
    outdir = restart_alone.outdir
    restart_alone.ran = True
    try:
        restart_alone.servers = restart_alone.start(["worker:0", "worker:1", "ps:0"])
        signal = outdir / "restart"
        second = restart_alone.start(["chief:0"], PS_TRAIN_START_SIGNAL=str(signal))["chief:0"]
        first = restart_alone.start(["chief:0"], PS_TRAIN_KILL_AFTER=f"{signal}.ready")["chief:0"]
        first_output, _ = first.communicate(timeout=300)
        assert first.returncode == -9 and "killing chief-0" in first_output, first_output[-3000:]
        assert [epoch for epoch, _ in epochs(outdir)] == [0, 1]
        assert second.poll() is None, second.communicate()[0][-3000:]
        # Kubernetes' first restart back-off, 10 s from the kill: longer than the servers' old 5 s grace.
        time.sleep(max(0.0, float((outdir / "fault-time").read_text()) + 10 - time.time()))
        signal.touch()
        _wait_for_file(outdir / "restart.joined", second)
        request.getfixturevalue("worker_dies_at_start")  # started now: their waits overlap this test's
        request.getfixturevalue("lone_chief")
        output, _ = second.communicate(timeout=300)
        restart_alone.chief_ended = time.monotonic()
        assert second.returncode == 0, output[-4000:]
        assert [epoch for epoch, _ in epochs(outdir)] == [0, 1, 2, 3, 4]  # resumed: none lost, none repeated
    except BaseException:
        _end(restart_alone.processes)  # a failed scenario leaves nothing waiting for the module's end
        raise
    restart_alone.resumed = True
    if not any(item.name == LEAVE_CHECK for item in request.session.items):  # selected alone: check it now
        restart_alone.check_the_servers_left()


def test_auto_picks_parameter_server_from_tf_config(sharded):
    _, _, chief = sharded
    assert (chief["kind"], chief["num_workers"], chief["num_ps"]) == ("parameter_server", 2, 2)


def test_the_chief_stops_the_coordinators_threads_before_the_interpreter_finalizes(sharded):
    """A coordinator thread that returned from TensorFlow's C++ during finalization aborted the chief
    after a finished training (`terminate called ... FATAL: exception not rethrown`, exit 134, twice in
    one suite run on the lab): at exit tfdist stops the coordinator and waits for its threads first."""
    outdir, _, _ = sharded
    assert json.loads((outdir / "exit-threads.json").read_text()) == []


def test_training_converges_on_two_workers_and_two_sharded_ps(sharded):
    _, _, chief = sharded
    assert chief["loss"][-1] < 0.2 * chief["loss"][0]
    assert chief["evaluate"] < 0.5


def test_sharded_variables_land_on_different_ps_tasks(sharded):
    _, _, chief = sharded
    for devices in (chief["embedding_devices"], chief["kernel_devices"]):
        assert sorted(devices) == ["/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"]


def test_sharded_weights_round_trip_through_save_and_restore(sharded):
    _, _, chief = sharded
    assert chief["restore_max_abs_diff"] == 0.0


def test_evaluator_evaluates_the_chiefs_checkpoints(sharded):
    outdir, result, _ = sharded
    assert sorted(p.name for p in (outdir / "checkpoints").glob("ckpt-*.index")) == [
        "ckpt-1.index", "ckpt-2.index", "ckpt-3.index", "ckpt-4.index"]
    evaluated = [line for line in result.stdout.splitlines() if "[tfdist] evaluator: step" in line]
    assert evaluated and all(line.startswith("[evaluator:0]") for line in evaluated)
    assert any("step 256 " in line for line in evaluated), "the last checkpoint (4 x 64 steps) was evaluated"


def test_servers_and_the_evaluator_leave_out_tensorflows_chatter_about_what_tfdist_does(sharded):
    """Run as a user runs it (TF_CPP_MIN_LOG_LEVEL unset): each ps and worker printed TensorFlow's
    22-line SessionOptions dump when the chief connected, and the evaluator 6 lines for each checkpoint
    it evaluated (up to 4), whose Adagrad state it does not restore (TensorFlow prints them when the
    model goes)."""
    from tfdist.tf_noise import SUMMARY

    _, result, _ = sharded
    lines = result.stdout.splitlines()
    assert [line for line in lines if any(chatter in line for chatter in SERVER_CHATTER)] == []
    assert [line for line in lines if "Value in checkpoint could not be found" in line] == []
    assert [line for line in lines if SUMMARY in line] == [f"[evaluator:0] {SUMMARY}"]
    # what the user and tfdist print stays
    assert len([line for line in lines if line.startswith("[chief:0]") and "Epoch " in line]) == 4
    # the sidecar evaluator takes the newest checkpoint when it looks, so under load it may skip one
    # (test_evaluator_evaluates_the_chiefs_checkpoints); its line for the last one always stays
    evaluated = [line for line in lines if "[tfdist] evaluator: step" in line]
    assert 1 <= len(evaluated) <= 4 and any("step 256 " in line for line in evaluated), evaluated
    assert {line.split()[2] for line in lines if "serving; waiting for the chief" in line} == {
        "ps:0", "ps:1", "worker:0", "worker:1"}


def test_output_lines_are_prefixed_and_no_process_is_left(sharded):
    outdir, result, _ = sharded
    prefixes = {line.split("]")[0] + "]" for line in result.stdout.splitlines() if line.startswith("[")}
    assert {"[chief:0", "[worker:0", "[worker:1", "[ps:0", "[ps:1", "[evaluator:0"} <= {p.rstrip("]") for p in prefixes}
    assert leftover_processes(outdir) == []


def test_a_killed_worker_does_not_stop_training(tmp_path):
    result = launch("kill-worker", tmp_path, "--workers", "2", "--ps", "1")
    assert result.returncode == 0, result.stdout[-4000:]
    assert "killing worker-1" in result.stdout
    losses = [loss for _, loss in epochs(tmp_path)]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert leftover_processes(tmp_path) == []


def test_a_killed_ps_fails_the_chief_with_a_clear_error(tmp_path):
    result = launch("kill-ps", tmp_path, "--workers", "2", "--ps", "1", timeout=300)
    reaction = time.time() - float((tmp_path / "fault-time").read_text())
    assert result.returncode != 0
    assert "killing ps-0" in result.stdout
    assert "ParameterServerError: the parameter-server job lost ps:0" in result.stdout
    assert "fix: restart the whole cluster" in result.stdout
    assert reaction < 120, f"the chief took {reaction:.0f}s after the fault to give up"  # only a hang breaks it
    assert leftover_processes(tmp_path) == []


def test_a_relaunched_chief_resumes_at_the_last_finished_epoch(tmp_path):
    first = launch("restart", tmp_path, "--workers", "2", "--ps", "1")
    assert first.returncode != 0 and "killing chief-0" in first.stdout
    assert [epoch for epoch, _ in epochs(tmp_path)] == [0, 1]
    second = launch("restart", tmp_path, "--workers", "2", "--ps", "1")
    assert second.returncode == 0, second.stdout[-4000:]
    assert [epoch for epoch, _ in epochs(tmp_path)] == [0, 1, 2, 3, 4]  # none lost, none repeated
    assert leftover_processes(tmp_path) == []


TUTORIAL_FORMS = ["resolver", "cluster_spec", "dict", "keras_3"]


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """ps_tutorial.py: one process, one in-process cluster, every form of ``cluster=`` in turn."""
    outdir = tmp_path_factory.mktemp("ps-tutorial")
    result = subprocess.run([sys.executable, str(SCRIPTS / "ps_tutorial.py"), str(outdir), ",".join(TUTORIAL_FORMS)],
                            capture_output=True, text=True, timeout=240, env=users_env())
    return result, outdir


def test_the_tutorial_leaves_out_tensorflows_chatter_as_tfdist_connects_its_servers(tutorial):
    """Run as a user runs it (TF_CPP_MIN_LOG_LEVEL unset), the tutorial printed 106 lines for one form,
    88 of them the SessionOptions dumps of its four servers as make_strategy connected to them; each
    form connects again. The tutorial's own servers still say that they started."""
    result, _ = tutorial
    lines = (result.stdout + result.stderr).splitlines()
    assert [line for line in lines if "SessionOptions" in line or "eager service context" in line] == []
    assert len([line for line in lines if "Started server with target" in line]) == 4  # the tutorial's own


def test_tensorflows_parameter_server_tutorial_trains_with_import_keras(tutorial):
    """The tutorial's Model.fit part with Keras 3 in place of tf.keras (issue 37): Keras 3 alone has no
    parameter-server training (keras-team/keras#18624); strategy.fit runs it on tfdist's loop."""
    result, outdir = tutorial
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    chief = json.loads((outdir / "keras_3.json").read_text())
    assert "error" not in chief, chief
    assert (chief["keras"], chief["is_chief"], chief["num_workers"], chief["num_ps"]) == ("keras", True, 2, 2)
    assert len(chief["loss"]) == 3 and chief["loss"][-1] < 0.5 * chief["loss"][0], chief["loss"]
    assert len(chief["kernel_devices"]) == 1 and chief["kernel_devices"][0].startswith("/job:ps/")  # whole


@pytest.mark.parametrize("form", [form for form in TUTORIAL_FORMS if form != "keras_3"])
def test_tensorflows_parameter_server_tutorial_ports_with_its_cluster_resolver(tutorial, form):
    """`cluster=resolver` used to raise AttributeError: 'SimpleClusterResolver' object has no attribute 'items'."""
    result, outdir = tutorial
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    chief = json.loads((outdir / f"{form}.json").read_text())
    assert "error" not in chief, chief
    assert (chief["is_chief"], chief["num_workers"], chief["num_ps"]) == (True, 2, 2)
    assert chief["loss"][-1] < 0.5 * chief["loss"][0]
    assert [d.split("/device")[0] for d in chief["kernel_devices"]] == [
        "/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]  # min_shard_bytes split the kernel


def test_each_worker_reads_its_own_shard_of_the_arrays(tutorial):
    """shard_data (on by default) gives each worker its own part of numpy arrays. It used to shard by
    the InputContext, which under parameter servers says one pipeline on every worker, so both workers
    read every example (ids 0, 1, 2, ... on each)."""
    _, outdir = tutorial
    shards = json.loads((outdir / "resolver.json").read_text())["shards"]
    assert sorted(shards) == ["0", "1"], shards
    assert all(i % 2 == 0 for i in shards["0"]) and all(i % 2 == 1 for i in shards["1"]), shards
    assert not set(shards["0"]) & set(shards["1"])


def _start_tasks(names: list[str], cluster: dict, mode: str, outdir: Path,
                 **env: str) -> dict[str, subprocess.Popen]:
    """Tasks started by hand, as an orchestrator does (no tfdist launch): one process each."""
    processes = {}
    for name in names:
        task_type, index = name.split(":")
        config = json.dumps({"cluster": cluster, "task": {"type": task_type, "index": int(index)}})
        processes[name] = subprocess.Popen(
            [sys.executable, str(SCRIPTS / "ps_train.py"), mode, str(outdir)], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
            env=subprocess_env(TF_CONFIG=config, GRPC_FAIL_FAST="use_caller", **env))
    return processes


def _hand_cluster() -> dict[str, list[str]]:
    from tfdist.cluster import free_ports

    ports = free_ports(4)
    return {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:3]],
            "ps": [f"127.0.0.1:{ports[3]}"]}


def _end(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


class RestartAlone:
    """The restart scenario's tasks, started by hand in one cluster (no tfdist launch), all ended at the
    module's end: once the restarted chief is done its servers wait their 60 s of grace, and the
    module's other tests run meanwhile; the module's last test checks that they left by themselves."""

    #: how long after the restarted chief's end the servers may take to leave (60 s of grace, loaded machine)
    LEAVE_WITHIN = 180.0

    def __init__(self, outdir: Path) -> None:
        self.outdir, self.cluster = outdir, _hand_cluster()
        self.processes: list[subprocess.Popen] = []
        self.servers: dict[str, subprocess.Popen] = {}
        self.ran = self.resumed = False  # the scenario started; the restarted chief finished every epoch
        self.chief_ended = 0.0  # time.monotonic() when the restarted chief ended

    def start(self, names: list[str], **env: str) -> dict[str, subprocess.Popen]:
        processes = _start_tasks(names, self.cluster, "restart-alone", self.outdir, **env)
        self.processes.extend(processes.values())
        return processes

    def check_the_servers_left(self) -> None:
        """Every server exited 0 by itself within ``LEAVE_WITHIN`` of the restarted chief's end."""
        for name, server in self.servers.items():
            server_output, _ = server.communicate(timeout=max(1.0, self.chief_ended + self.LEAVE_WITHIN
                                                                  - time.monotonic()))
            assert server.returncode == 0, f"{name}: {server_output[-2000:]}"


@pytest.fixture(scope="module")
def restart_alone(tmp_path_factory):
    scenario = RestartAlone(tmp_path_factory.mktemp("ps-restart-alone"))
    yield scenario
    _end(scenario.processes)


# The next two jobs spend most of their time waiting on a timeout (15 s, 20 s) with TensorFlow
# imported and nothing to compute; the restart test (the module's first) starts them once its restarted chief has
# joined, and their tests read their output.
@pytest.fixture(scope="module")
def worker_dies_at_start(tmp_path_factory) -> tuple[Path, subprocess.Popen, Path]:
    """`tfdist launch --workers 2 --ps 1` in which worker:1 exits before serving (stdout to a file)."""
    outdir = tmp_path_factory.mktemp("ps-worker-dies")
    stdout = tmp_path_factory.mktemp("ps-worker-dies-log") / "stdout.txt"
    command = [sys.executable, "-m", "tfdist", "launch", "--workers", "2", "--ps", "1", "--",
               sys.executable, str(SCRIPTS / "ps_train.py"), "worker-dies-at-start", str(outdir)]
    with open(stdout, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, text=True,
                                   env=subprocess_env())
    yield outdir, process, stdout
    _end([process])


@pytest.fixture(scope="module")
def lone_chief(tmp_path_factory) -> subprocess.Popen:
    """A restarted chief whose servers have all left: only the chief of a 4-task cluster runs."""
    outdir = tmp_path_factory.mktemp("ps-lone-chief")
    process = _start_tasks(["chief:0"], _hand_cluster(), "lone-chief", outdir)["chief:0"]
    yield process
    _end([process])


def _wait_for_file(path: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    """Until ``path`` exists; fails if ``process`` ended first, or after ``timeout`` (only a hang)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"{path.name} never came: {process.communicate()[0][-3000:]}")
        assert time.monotonic() < deadline, f"{path.name} never came (hung)"
        time.sleep(0.2)


def test_a_chief_restarted_after_the_servers_left_fails_fast_naming_them(lone_chief):
    output, _ = lone_chief.communicate(timeout=300)  # nobody else was ever started
    assert lone_chief.returncode != 0
    assert "the chief waited 20s and these tasks never answered: ps:0 (127.0.0.1:" in output
    assert "worker:0 (127.0.0.1:" in output and "worker:1 (127.0.0.1:" in output


def test_a_worker_that_dies_at_start_up_fails_the_chief_naming_it(worker_dies_at_start):
    """The chief used to wait for the missing worker forever, with no output."""
    outdir, process, stdout = worker_dies_at_start
    process.wait(timeout=240)
    output = stdout.read_text()
    assert process.returncode != 0
    assert "worker:1 fails before serving, on purpose" in output
    assert "ParameterServerError: the chief waited 15s and these tasks never answered: worker:1 (" in output
    assert leftover_processes(outdir) == []


LEAVE_CHECK = "test_the_restarted_chiefs_servers_still_leave_by_themselves_afterwards"


def test_the_restarted_chiefs_servers_still_leave_by_themselves_afterwards(restart_alone):
    """The module's last test: the servers of the restart scenario (its first test) have waited their
    grace after the restarted chief, while the tests between ran."""
    if not restart_alone.ran:
        pytest.skip("checks what test_a_chief_restarted_alone_finds_the_servers_and_resumes started: select both")
    assert restart_alone.resumed, "the restart scenario failed (test_a_chief_restarted_alone_...): nothing to check"
    restart_alone.check_the_servers_left()
