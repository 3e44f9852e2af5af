"""Which task exits end a local job, and after how long: the policy alone, no processes."""
from __future__ import annotations

import pytest

from tfdist.errors import TfdistError
from tfdist.launch.oom import KillCause
from tfdist.launch.commands import LaunchError
from tfdist.launch.policy import ParameterServerPolicy, PeerPolicy, Verdict, describe_exit

TASKS = ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]


def _serving(timeout: float = 60) -> ParameterServerPolicy:
    policy = ParameterServerPolicy(TASKS, timeout=timeout)
    for worker in ("worker:0", "worker:1"):
        policy.served(worker)
    return policy


def test_exits_are_described_by_code_or_by_signal():
    assert describe_exit("worker:1", 1) == "worker:1 exited with code 1"
    assert describe_exit("ps:0", -9) == "ps:0 killed by SIGKILL"
    assert describe_exit("ps:0", -15) == "ps:0 killed by SIGTERM"
    assert describe_exit("chief:0", 0) == "chief:0 exited with code 0"


def test_the_chief_exit_ends_the_job_with_its_code():
    policy = _serving()
    assert policy.verdict(now=0) is None
    assert policy.exited("chief:0", 3, now=1) == ["chief:0 exited with code 3"]
    assert policy.verdict(now=1) == Verdict(3)
    policy = _serving()
    policy.exited("chief:0", -9, now=1)
    assert policy.verdict(now=1) == Verdict(137)


def test_one_worker_lost_mid_training_is_tolerated():
    policy = ParameterServerPolicy(["chief:0", "worker:0", "worker:1", "worker:2", "ps:0"], timeout=10)
    for worker in ("worker:0", "worker:1", "worker:2"):
        policy.served(worker)
    assert policy.exited("worker:1", -9, now=5) == [
        "worker:1 killed by SIGKILL; the coordinator goes on with 2 workers"]
    assert policy.exited("worker:2", 1, now=6) == [
        "worker:2 exited with code 1; the coordinator goes on with 1 worker"]
    assert policy.verdict(now=10_000) is None


@pytest.mark.parametrize("lost, returncode, expected", [
    ("ps:0", -9, "ps:0 killed by SIGKILL; training cannot go on without the variables a ps task holds, "
                 "so the job ends in 60 s unless the chief exits first"),
    ("ps:0", 0, "ps:0 exited with code 0; training cannot go on"),
])
def test_a_lost_ps_ends_the_job_after_the_timeout(lost, returncode, expected):
    policy = _serving(timeout=60)
    lines = policy.exited(lost, returncode, now=100)
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    assert policy.verdict(now=159.9) is None
    verdict = policy.verdict(now=160)
    assert verdict.code == 1
    assert verdict.message.startswith("stopping the job: it lost ps:0 and the chief is still running 60 s "
                                      "later; fix: read the [ps:0] lines above")


def test_the_chief_exiting_within_the_timeout_keeps_its_own_code():
    policy = _serving(timeout=60)
    policy.exited("ps:0", -9, now=100)
    policy.exited("chief:0", 1, now=130)
    assert policy.verdict(now=130) == Verdict(1)
    policy = _serving(timeout=60)
    policy.exited("ps:0", -9, now=100)
    policy.exited("chief:0", 0, now=130)  # it finished after all: its word is final
    assert policy.verdict(now=200) == Verdict(0)


def test_every_worker_lost_ends_the_job():
    policy = _serving(timeout=30)
    assert policy.exited("worker:0", 1, now=0) == [
        "worker:0 exited with code 1; the coordinator goes on with 1 worker"]
    assert policy.verdict(now=1000) is None
    lines = policy.exited("worker:1", -9, now=1000)
    assert lines == ["worker:1 killed by SIGKILL; every worker is lost (worker:0, worker:1), so the "
                     "coordinator has none to train on, so the job ends in 30 s unless the chief exits first"]
    assert policy.verdict(now=1029) is None
    assert policy.verdict(now=1030).message.startswith("stopping the job: it lost worker:1 ")


def test_a_worker_that_exits_before_it_served_ends_the_job():
    """The chief connects to every task at start-up and would wait for this one forever."""
    policy = ParameterServerPolicy(TASKS, timeout=10)
    policy.served("worker:0")
    assert policy.exited("worker:1", 1, now=2) == [
        "worker:1 exited with code 1 before it served; the chief cannot connect to the cluster without it, "
        "so the job ends in 10 s unless the chief exits first"]
    assert policy.verdict(now=11.9) is None
    verdict = policy.verdict(now=12)
    assert verdict.code == 1
    assert "it lost worker:1 " in verdict.message and "[worker:1] lines" in verdict.message


def test_the_deadline_counts_from_the_first_loss():
    policy = _serving(timeout=60)
    policy.exited("ps:0", 1, now=0)
    assert policy.exited("worker:0", 1, now=50) == [
        "worker:0 exited with code 1; the coordinator goes on with 1 worker"]
    lines = policy.exited("worker:1", 1, now=55)
    assert lines[0].endswith("so the job ends in 5 s unless the chief exits first")
    verdict = policy.verdict(now=60)
    assert verdict.code == 1 and "it lost ps:0, worker:1 " in verdict.message


def test_a_zero_timeout_ends_the_job_at_once():
    policy = _serving(timeout=0)
    policy.exited("ps:0", 1, now=5)
    assert policy.verdict(now=5).code == 1


def test_the_evaluator_is_a_sidecar():
    policy = _serving()
    assert policy.exited("evaluator:0", 1, now=0) == [
        "evaluator:0 exited with code 1; training goes on without the evaluator"]
    assert policy.verdict(now=1000) is None


def test_only_workers_are_probed_and_a_plan_without_chief_is_refused():
    assert ParameterServerPolicy(TASKS).probe == {"worker:0", "worker:1"}
    with pytest.raises(LaunchError, match="needs a chief task") as info:
        ParameterServerPolicy(["worker:0", "ps:0"])
    assert "fix:" in str(info.value)
    with pytest.raises(LaunchError, match="--task-timeout is -1; fix:"):
        ParameterServerPolicy(TASKS, timeout=-1)


def test_peer_workers_end_at_the_first_failure_or_when_all_finished():
    policy = PeerPolicy(["worker:0", "worker:1"])
    assert policy.exited("worker:0", 0, now=0) == ["worker:0 exited with code 0"]
    assert policy.verdict(now=0) is None
    assert policy.exited("worker:1", 0, now=1) == ["worker:1 exited with code 0"]
    assert policy.verdict(now=1) == Verdict(0)
    policy = PeerPolicy(["worker:0", "worker:1"])
    assert policy.exited("worker:1", 3, now=0) == [
        "worker:1 exited with code 3; stopping the other workers (every worker must take part in each step)"]
    assert policy.verdict(now=0) == Verdict(3)
    assert PeerPolicy(["worker:0"]).probe == frozenset()


def test_launch_errors_are_tfdist_errors_and_keep_their_builtin_base():
    from tfdist.launch.bind import BindShimError

    assert issubclass(LaunchError, TfdistError) and issubclass(LaunchError, ValueError)
    assert issubclass(BindShimError, TfdistError) and issubclass(BindShimError, RuntimeError)


# --- a task the OOM killer ended (the cause comes from tfdist.launch.oom) -----------------------------
OOM_ON_H3 = KillCause(True, "h3", 768 << 20)


def test_an_oom_killed_ps_ends_the_job_at_once_with_one_line_naming_task_host_memory_and_fix():
    policy = _serving(timeout=60)
    lines = policy.exited("ps:0", -9, now=100, kill=OOM_ON_H3)
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("ps:0 on h3 ran out of memory: the kernel's OOM killer killed it (SIGKILL) at its "
                           "memory limit of 768 MiB (805306368 bytes); training cannot go on without the "
                           "variables a ps task holds, so the job ends now; fix: ")
    assert "shards=N" in line and "--ps-memory 805306368" in line and line.count("fix:") == 1
    assert policy.verdict(now=100) == Verdict(1)  # now, not 60 s later, and no second message


def test_a_chief_that_already_exited_keeps_its_code_after_an_oom_killed_ps():
    policy = _serving()
    policy.exited("chief:0", 3, now=1)
    policy.exited("ps:0", -9, now=1, kill=OOM_ON_H3)
    assert policy.verdict(now=1) == Verdict(3)


def test_an_oom_killed_worker_follows_the_worker_rules_and_says_why():
    policy = _serving(timeout=60)
    lines = policy.exited("worker:1", -9, now=5, kill=KillCause(True, "h2", None))
    assert lines == ["worker:1 on h2 ran out of memory: the kernel's OOM killer killed it (SIGKILL); the "
                     "coordinator goes on with 1 worker; fix: give h2 more memory, run fewer tasks there, or "
                     "lower the batch size"]
    assert policy.verdict(now=1000) is None
    assert policy.exited("chief:0", -9, now=6, kill=KillCause(True, "h1", None))[0].startswith(
        "chief:0 on h1 ran out of memory")
    assert policy.verdict(now=6) == Verdict(137)


def test_a_sigkill_of_unknown_cause_says_the_oom_killer_is_the_usual_one_and_waits_as_before():
    policy = _serving(timeout=60)
    lines = policy.exited("ps:0", -9, now=100, kill=KillCause(None))
    assert lines == ["ps:0 killed by SIGKILL (the kernel's OOM killer is the usual cause: check `dmesg` on "
                     "this machine); training cannot go on without the variables a ps task holds, so the job "
                     "ends in 60 s unless the chief exits first"]
    assert policy.verdict(now=159) is None and policy.verdict(now=160).code == 1


def test_peer_workers_name_an_oom_kill_too():
    policy = PeerPolicy(["worker:0", "worker:1"])
    lines = policy.exited("worker:1", -9, now=0, kill=KillCause(True, "h2", 1 << 30))
    assert lines[0].startswith("worker:1 on h2 ran out of memory") and "; stopping the other workers" in lines[0]
    assert lines[0].endswith("fix: give h2 more memory, run fewer tasks there, or lower the batch size")
    assert policy.verdict(now=0) == Verdict(137)
