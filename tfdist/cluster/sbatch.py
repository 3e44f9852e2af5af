"""A SLURM batch script whose every task runs with its own TF_CONFIG (``tfdist tf-config --format sbatch``).

The script asks for the nodes and tasks with ``#SBATCH`` lines and starts the tasks with one ``srun``;
each task computes its TF_CONFIG from the variables srun sets, through ``tfdist tf-config --format
slurm`` (:mod:`tfdist.cluster.slurm`: chief first, then the ps tasks, then the workers; the k-th task
on a node listens on ``port + k``), exports it and ``exec``s the user's command. Nothing here runs
anything: :func:`render_sbatch` returns the text.

A job with ps tasks asks for ``--no-kill`` (the ``#SBATCH`` line for the job and srun's option for its
step): by default SLURM ends the whole job when one of its nodes fails, and requeues it from the start,
which throws away what parameter servers promise, that the chief goes on with the workers it has left.
A job without ps tasks keeps SLURM's default: a lost worker stalls every collective, so ending the job
is right.

>>> job = BatchJob(command=("python", "train.py"), workers=1, ps=1, chief=True)
>>> [line for line in render_sbatch(job).splitlines() if line.startswith("#SBATCH")][1:]
['#SBATCH --nodes=3', '#SBATCH --ntasks=3', '#SBATCH --ntasks-per-node=1', '#SBATCH --no-kill']
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tfdist.cluster.errors import ClusterConfigError, Problem, shown
from tfdist.cluster.limits import MAX_TASKS, limit_text

#: The argv[0] of each task's inner shell (what ``ps`` shows for it).
TASK_SHELL_NAME = "tfdist-task"
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class BatchJob:
    """What a batch script runs: ``command`` in every task of a cluster of ``chief`` (0 or 1), ``ps``
    and ``workers`` tasks, over ``nodes`` nodes (None: one task per node)."""

    command: tuple[str, ...]
    workers: int
    ps: int = 0
    chief: bool = False
    nodes: int | None = None
    port: int = 2222
    job_name: str = "tfdist"

    @property
    def ntasks(self) -> int:
        """The tasks of the job: the chief, the ps tasks and the workers."""
        return int(self.chief) + self.ps + self.workers

    @property
    def node_count(self) -> int:
        """The nodes asked for: ``nodes``, or one per task."""
        return self.ntasks if self.nodes is None else self.nodes

    def problems(self) -> list[Problem]:
        """Every reason the job cannot be written, each naming its field (empty: it can)."""
        found = []
        if not self.command:
            found.append(Problem("command", "has no words; every task needs a command to run",
                                 "give the training command, e.g. 'python train.py'"))
        elif not self.command[0]:  # an empty argument later on ("--tag ''") is a valid one
            found.append(Problem("command", f"is {shown(shlex.join(self.command))}, whose first word, the "
                                 "program to run, is empty", "start with the program, e.g. 'python train.py'"))
        if self.workers < 1:
            found.append(Problem("workers", f"is {self.workers}; a job needs at least one worker",
                                 "ask for 1 or more workers"))
        if self.ps < 0:
            found.append(Problem("ps", f"is {self.ps}", "ask for 0 or more ps tasks"))
        elif self.ps and not self.chief:  # caught here, not in every task once the job has started
            found.append(Problem("chief", f"is off, but a cluster with ps tasks ({self.ps}) needs a chief, "
                                 "which runs ParameterServerStrategy's coordinator", "add the chief"))
        if self.ntasks > MAX_TASKS:
            found.append(Problem("workers", f"with the chief and ps tasks makes {self.ntasks:,} tasks; "
                                 f"tfdist's limit is {limit_text(MAX_TASKS)}", "ask for fewer tasks"))
        if self.nodes is not None and not 1 <= self.nodes <= max(self.ntasks, 1):
            found.append(Problem("nodes", f"is {self.nodes}, for {self.ntasks} task(s); each node needs "
                                 "at least one task", f"ask for 1 to {max(self.ntasks, 1)} nodes"))
        if not 1 <= self.port <= 65535:
            found.append(Problem("port", f"is {self.port}; ports are 1-65535", "use a port from 1 to 65535"))
        elif self.port + self.ntasks - 1 > 65535:
            found.append(Problem("port", f"is {self.port}, and a node may hold up to {self.ntasks} tasks "
                                 "listening on PORT+k, past 65535", "use a lower port"))
        if not _JOB_NAME.fullmatch(self.job_name):
            found.append(Problem("job_name", f"is {shown(self.job_name)}; a job name is 1-64 letters, "
                                 "digits, '.', '_' or '-', starting with a letter or digit",
                                 "use a name such as 'tfdist'"))
        return found


def tf_config_command(job: BatchJob, tfdist: str = "tfdist") -> list[str]:
    """The ``tfdist tf-config --format slurm`` command every task runs to get its TF_CONFIG."""
    argv = [tfdist, "tf-config", "--format", "slurm"]
    if job.ps:
        argv += ["--ps-count", str(job.ps)]
    if job.chief:
        argv.append("--with-chief")
    return argv + ["--port", str(job.port)]


def srun_argv(job: BatchJob, tfdist: str = "tfdist") -> list[str]:
    """The ``srun`` command of the script: every task exports its TF_CONFIG, then ``exec``s the command.

    A failing ``tf-config`` (its message on the task's stderr) ends the task with exit 2 before the
    command starts; the command's words reach it unchanged (no second round of shell expansion).
    """
    inner = (f'TF_CONFIG="$({shlex.join(tf_config_command(job, tfdist))})" || exit 2; '
             'export TF_CONFIG; exec "$@"')
    keep = ["--no-kill"] if job.ps else []  # a lost worker node does not end a parameter-server step
    return ["srun", *keep, "--distribution=block", "bash", "-c", inner, TASK_SHELL_NAME, *job.command]


def render_sbatch(job: BatchJob, tfdist: str = "tfdist") -> str:
    """The batch script of ``job`` (``sbatch FILE`` submits it); :class:`ClusterConfigError` lists every
    problem of ``job`` first. ``tfdist`` is how the tasks call tfdist (on their PATH by default)."""
    problems = job.problems()
    if problems:
        raise ClusterConfigError(problems)
    roles = [*(["a chief"] if job.chief else []), *([f"{job.ps} ps"] if job.ps else []),
             f"{job.workers} worker{'s' if job.workers != 1 else ''}"]
    summary = " + ".join(roles)
    where = f"{_count(job.ntasks, 'task')} on {_count(job.node_count, 'node')}"
    lines = [
        "#!/bin/bash",
        f"# {summary[:1].upper()}{summary[1:]}: {where}.",
        "# Each task computes its own TF_CONFIG from the variables srun sets (SLURM_JOB_NODELIST,",
        "# SLURM_NTASKS, SLURM_PROCID, SLURM_TASKS_PER_NODE) with `tfdist tf-config --format slurm`, then",
        "# runs the command. Add your site's #SBATCH lines (--time, --partition, --account) beside these;",
        "# submit with `sbatch FILE`.",
        f"#SBATCH --job-name={job.job_name}",
        f"#SBATCH --nodes={job.node_count}",
        f"#SBATCH --ntasks={job.ntasks}",
    ]
    if job.node_count == job.ntasks:
        lines.append("#SBATCH --ntasks-per-node=1")
    if job.ps:
        lines += ["# --no-kill: a lost worker node does not end the job (the chief goes on with the other",
                  "# workers); SLURM's default would end the job and requeue it from the start.",
                  "#SBATCH --no-kill"]
    lines += ["set -eu", f"exec {shlex.join(srun_argv(job, tfdist))}"]
    return "\n".join(lines) + "\n"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
