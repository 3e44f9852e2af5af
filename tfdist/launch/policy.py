"""Which task exits end a local job, and when. Pure: no processes, the time is passed in.

``tfdist.launch.local`` reports events to a policy (``served``: a task's port was seen
listening; ``exited``: a task ended, with its ``Popen.returncode``), prints the lines that
``exited`` returns, and asks ``verdict(now)`` whether to end the job and with which exit code.

Parameter-server jobs (``ParameterServerPolicy``):

=============================================  ====================================================
event                                          what the launcher does
=============================================  ====================================================
the chief exits                                ends the job with the chief's exit code
a ps task exits                                ends the job ``timeout`` s later (exit code 1)
                                               unless the chief exits first: training cannot go on
                                               without the variables a ps task holds
a ps task is OOM-killed                        ends the job at once (exit code 1), one line naming
                                               the task, its host, its memory limit and the fix
every worker has exited                        the same: the coordinator has nothing to train on
a worker exits before it ever listened         the same: the chief connects to every task at
                                               start-up and waits for this one forever
a worker exits after it listened, others live  goes on ("the coordinator goes on with N workers")
the evaluator exits                            goes on (it is a sidecar)
=============================================  ====================================================

The waiting gives the chief the first word: it usually fails by itself with a message that says
more (the strategy's ``ParameterServerError``). Not for a ps the OOM killer ended: its memory cgroup
says why (``tfdist.launch.oom``), the chief could only report a lost task, and the ps would run out
of memory again, so the job ends at once with the cause and the fix. Every bound above is ``timeout`` plus the
launcher's teardown grace. Without a check on the chief's side, one case has no bound: a worker
that listened and then died *before the chief connected* looks like a worker lost mid-training,
so the launcher lets the job go on while the chief waits for it. The chief's own start-up check
(it probes every task before connecting) closes that gap.

Peer jobs (``PeerPolicy``, MultiWorkerMirroredStrategy): every worker must finish; the first
non-zero exit ends the job at once with that exit code, and all workers exiting 0 ends it with 0.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Iterable, Protocol

from tfdist.launch.oom import KillCause
from tfdist.launch.commands import LaunchError

DEFAULT_TASK_TIMEOUT = 60.0
STOPPED_EXIT_CODE = 1  # the launcher ended a job that could not go on


def exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it: a signal N becomes 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(name: str, returncode: int) -> str:
    """``worker:1 exited with code 1`` or ``worker:1 killed by SIGKILL``."""
    if returncode < 0:
        try:
            how = signal.Signals(-returncode).name
        except ValueError:
            how = f"signal {-returncode}"
        return f"{name} killed by {how}"
    return f"{name} exited with code {returncode}"


@dataclass(frozen=True)
class Verdict:
    """End the job with ``code``; print ``message`` first when there is one."""

    code: int
    message: str | None = None


class Policy(Protocol):
    probe: frozenset[str]  # tasks whose serving matters: the runner reports ``served`` for them

    def served(self, name: str) -> None: ...

    def exited(self, name: str, returncode: int, now: float, kill: KillCause | None = None) -> list[str]: ...

    def verdict(self, now: float) -> Verdict | None: ...


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class ParameterServerPolicy:
    """A chief, workers, ps tasks (and an evaluator); see the module docstring for the rules.

    >>> policy = ParameterServerPolicy(["chief:0", "worker:0", "worker:1", "ps:0"], timeout=60)
    >>> policy.exited("worker:1", 1, now=5.0)
    ['worker:1 exited with code 1 before it served; the chief cannot connect to the cluster without it, \
so the job ends in 60 s unless the chief exits first']
    >>> policy.verdict(now=64.0) is None, policy.verdict(now=65.0).code
    (True, 1)
    """

    def __init__(self, tasks: Iterable[str], timeout: float = DEFAULT_TASK_TIMEOUT) -> None:
        self.tasks = list(tasks)
        if "chief:0" not in self.tasks:
            raise LaunchError(f"a parameter-server job needs a chief task, got {self.tasks}; fix: plan it "
                              "with plan_local_cluster")
        if timeout < 0:
            raise LaunchError(f"--task-timeout is {timeout}; fix: give 0 or more seconds")
        self.timeout = timeout
        self._workers = [name for name in self.tasks if name.startswith("worker:")]
        self.probe = frozenset(self._workers)
        self._served: set[str] = set()
        self._exited: dict[str, int] = {}
        self._lost: list[str] = []  # tasks whose loss ends the job, in the order they went
        self._lost_since: float | None = None
        self._out_of_memory = False  # a ps the OOM killer ended: the job ends at once

    def served(self, name: str) -> None:
        self._served.add(name)

    def exited(self, name: str, returncode: int, now: float, kill: KillCause | None = None) -> list[str]:
        """Record an exit; the lines to print. ``kill``: what the memory cgroup says of a SIGKILL."""
        self._exited[name] = returncode
        line = describe_exit(name, returncode) if kill is None else kill.describe(name)
        fix = "" if kill is None or kill.fix(name) is None else f"; fix: {kill.fix(name)}"
        kind = name.split(":", 1)[0]
        if kind == "chief":
            return [line + fix]
        if kind == "evaluator":
            return [f"{line}; training goes on without the evaluator{fix}"]
        if kind == "ps" and kill is not None and kill.oom:
            self._lost.append(name)
            self._out_of_memory = True
            return [f"{line}; training cannot go on without the variables a ps task holds, so the job ends "
                    f"now{fix}"]
        if kind == "ps":
            reason = "training cannot go on without the variables a ps task holds"
        else:
            alive = [worker for worker in self._workers if worker not in self._exited]
            if not alive:
                reason = (f"every worker is lost ({', '.join(self._workers)}), so the coordinator has none "
                          "to train on")
            elif name not in self._served:
                line += " before it served"
                reason = "the chief cannot connect to the cluster without it"
            else:
                return [f"{line}; the coordinator goes on with {_plural(len(alive), 'worker')}{fix}"]
        self._lost.append(name)
        if self._lost_since is None:
            self._lost_since = now
        remaining = max(0.0, self._lost_since + self.timeout - now)
        return [f"{line}; {reason}, so the job ends in {remaining:.0f} s unless the chief exits first{fix}"]

    def verdict(self, now: float) -> Verdict | None:
        if "chief:0" in self._exited:
            return Verdict(exit_code(self._exited["chief:0"]))
        if self._out_of_memory:  # the exit line said why and how to fix it
            return Verdict(STOPPED_EXIT_CODE)
        if self._lost_since is None or now - self._lost_since < self.timeout:
            return None
        lost = ", ".join(self._lost)
        return Verdict(STOPPED_EXIT_CODE, (
            f"stopping the job: it lost {lost} and the chief is still running {self.timeout:.0f} s later; "
            f"fix: read the [{self._lost[0]}] lines above, fix the cause and launch again (with "
            "tf.keras.callbacks.BackupAndRestore, training resumes from the last finished epoch)"))


class PeerPolicy:
    """Peer workers (MultiWorkerMirroredStrategy): all must finish; the first failure ends the job."""

    probe: frozenset[str] = frozenset()

    def __init__(self, tasks: Iterable[str]) -> None:
        self.tasks = list(tasks)
        self._exited: dict[str, int] = {}
        self._failed: str | None = None

    def served(self, name: str) -> None:
        pass

    def exited(self, name: str, returncode: int, now: float,  # noqa: ARG002
               kill: KillCause | None = None) -> list[str]:
        self._exited[name] = returncode
        line = describe_exit(name, returncode) if kill is None else kill.describe(name)
        fix = "" if kill is None or kill.fix(name) is None else f"; fix: {kill.fix(name)}"
        if returncode != 0 and self._failed is None:
            self._failed = name
            return [f"{line}; stopping the other workers (every worker must take part in each step){fix}"]
        return [line + fix]

    def verdict(self, now: float) -> Verdict | None:  # noqa: ARG002
        if self._failed is not None:
            return Verdict(exit_code(self._exited[self._failed]))
        if len(self._exited) == len(self.tasks):
            return Verdict(0)
        return None
