"""A SLURM cluster on a network lab (:mod:`tfdist.testing.netlab`), for tests: jobs submitted to it run
on the lab's hosts as on a real cluster's nodes.

One ``munged`` (its own key and socket in the lab's directory, on the controller host; the socket is a
file, so every host reaches it), ``slurmctld`` on the controller host and a ``slurmd`` on each node
host, named after the host (its UTS hostname), with their own spool, state, log and pid files and
ports chosen free. One ``slurm.conf`` serves them all: slurmd's paths carry ``%n`` (the node's name),
and one file keeps SLURM's check that every daemon reads the same configuration quiet.
``AuthInfo=socket=...`` ties every daemon and client to this munged, so the cluster stays apart from
any other SLURM on the machine. Commands run on the controller host with
:attr:`SlurmLab.env` (``SLURM_CONF``), e.g.::

    from tfdist.testing.netlab import Lab
    from tfdist.testing.slurmlab import SlurmLab

    with Lab(["h0", "h1", "h2", "h3"]) as lab, SlurmLab(lab, "h0", ["h1", "h2", "h3"]) as slurm:
        print(slurm.run(["sinfo", "-N"]).stdout)            # h1..h3 idle
        job = slurm.sbatch(script, env=env, cwd=tmp_path)  # the job id
        slurm.wait_job(job, timeout=300)                    # "COMPLETED", "FAILED", "CANCELLED", ...

Daemons start with ``lab.popen``; the constructor returns once ``sinfo`` shows every node idle (bounded:
on timeout a :class:`SlurmLabError` with the tails of the daemons' logs). :meth:`SlurmLab.close`
cancels the jobs, stops the daemons, kills what they left on the hosts (job steps) and removes the
cluster's directory; the lab's own close kills anything still there. Needs root and Debian's
``slurm-wlm`` and ``munge`` (``make setup``). The configuration is for tests: root runs everything,
no cgroups, no accounting.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist.cluster.spec import free_ports
from tfdist.errors import with_fix
from tfdist.launch.processes import terminate
from tfdist.testing import labsweep
from tfdist.testing.labspec import LabError
from tfdist.testing.netlab import Lab

__all__ = ["SlurmConfig", "SlurmLab", "SlurmLabError", "node_line", "parse_node_states", "slurm_conf"]

_SETUP = "run `make setup` (scripts/setup.sh installs slurm-wlm and munge)"
_TOOLS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sinfo": "slurm-client",
          "sbatch": "slurm-client", "scontrol": "slurm-client", "scancel": "slurm-client",
          "squeue": "slurm-client"}
#: Job states after which a job does not run again (``scontrol show job``'s ``JobState``).
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                          "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")
_LOG_TAIL = 1200


class SlurmLabError(LabError):
    """The SLURM cluster of a lab could not be built or used (the message says what and the fix)."""


@dataclass(frozen=True)
class SlurmConfig:
    """Everything ``slurm.conf`` says: the hosts (name -> address), the ports, the files' directory."""

    cluster_name: str
    controller: str
    controller_address: str
    nodes: tuple[tuple[str, str], ...]
    ctld_port: int
    slurmd_port: int
    directory: Path
    cpus: int = 4
    partition: str = "lab"

    @property
    def munge_socket(self) -> Path:
        return self.directory / "munge" / "munge.socket"

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.nodes)

    def check(self) -> None:
        """SlurmLabError naming the first field slurmctld would refuse (or misread)."""
        for field, name in [("cluster_name", self.cluster_name), ("controller", self.controller),
                            ("partition", self.partition), *(("nodes", name) for name, _ in self.nodes)]:
            if not _NAME.fullmatch(name):
                raise SlurmLabError(with_fix(f"`{field}` {name!r} is not a SLURM name (lower-case letters, "
                                             "digits and '-', starting with a letter, at most 40)",
                                             "name lab hosts like h0, h1"))
        if not self.nodes:
            raise SlurmLabError(with_fix("`nodes` is empty", "give at least one node host"))
        if self.controller in self.node_names:
            raise SlurmLabError(with_fix(f"`controller` {self.controller!r} is also a node",
                                         "run slurmctld on a host that is not a node"))
        for field, port in (("ctld_port", self.ctld_port), ("slurmd_port", self.slurmd_port)):
            if not 1 <= port <= 65535:
                raise SlurmLabError(with_fix(f"`{field}` {port} is not a port", "pick one from 1 to 65535"))
        if self.cpus < 1:
            raise SlurmLabError(with_fix(f"`cpus` is {self.cpus}", "declare 1 or more CPUs per node"))


def node_line(name: str, address: str, cpus: int, port: int) -> str:
    """The ``NodeName`` line of one node (``config_overrides`` lets ``CPUs`` exceed the machine's)."""
    return f"NodeName={name} NodeAddr={address} Port={port} CPUs={cpus} State=UNKNOWN"


def slurm_conf(config: SlurmConfig) -> str:
    """The text of the cluster's ``slurm.conf``: one file for every daemon and client (``%n`` is the
    node's name in slurmd's paths)."""
    config.check()
    d = config.directory
    lines = [
        "# A test cluster on a tfdist network lab (tfdist.testing.slurmlab): not for production.",
        f"ClusterName={config.cluster_name}",
        f"SlurmctldHost={config.controller}({config.controller_address})",
        f"SlurmctldPort={config.ctld_port}",
        f"SlurmdPort={config.slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={config.munge_socket}",
        f"StateSaveLocation={d / 'state'}",
        f"SlurmdSpoolDir={d / 'spool' / '%n'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}",
        f"SlurmdPidFile={d / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={d / 'slurmctld.log'}",
        f"SlurmdLogFile={d / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",  # no cgroups: the lab owns the hosts' cgroups
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SelectType=select/linear",  # whole nodes: a job's tasks never share a node with another job's
        "SchedulerType=sched/builtin",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SwitchType=switch/none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "InactiveLimit=0",
        "KillWait=5",
        # a node whose slurmd stops answering (its link cut) is DOWN about 40-50 s later, not minutes:
        # the node-cut tests wait for it; long enough that a Horovod job fails by itself first (Gloo's
        # timeout, 10 s in those tests) rather than SLURM ending it; a healthy slurmd answers in seconds
        "SlurmdTimeout=30",
        "SlurmctldTimeout=60",
        "MinJobAge=600",
        *(node_line(name, address, config.cpus, config.slurmd_port) for name, address in config.nodes),
        f"PartitionName={config.partition} Nodes={','.join(config.node_names)} Default=YES "
        "MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def cgroup_conf(config: SlurmConfig) -> str:
    """The ``cgroup.conf`` beside ``slurm.conf``: slurmd initialises its cgroup plugin even when no
    plugin uses cgroups, and a lab host's /sys/fs/cgroup holds only its memory hierarchy; an empty
    mount point of the cluster's own keeps slurmd off the lab's cgroups (nothing is created in it)."""
    return (f"CgroupPlugin=cgroup/v1\nCgroupMountpoint={config.directory / 'cgroup'}\n"
            "CgroupAutomount=no\n")


def parse_node_states(sinfo_output: str) -> dict[str, str]:
    """``sinfo -h -N -o '%N %T'`` lines -> ``{node: state}`` (``idle``, ``allocated``, ``down*`` ...)."""
    states = {}
    for line in sinfo_output.splitlines():
        words = line.split()
        if len(words) == 2:
            states[words[0]] = words[1]
    return states


def not_idle(states: Mapping[str, str], nodes: Sequence[str]) -> dict[str, str]:
    """The nodes of ``nodes`` that ``states`` does not show idle, with what it shows (``absent``)."""
    return {node: states.get(node, "absent") for node in nodes if states.get(node) != "idle"}


def parse_job_state(scontrol_output: str) -> str | None:
    """``JobState`` from ``scontrol show job ID`` (``RUNNING``, ``COMPLETED`` ...), None when absent."""
    match = re.search(r"\bJobState=(\S+)", scontrol_output)
    return match.group(1) if match else None


class SlurmLab:
    """slurmctld on ``controller``, a slurmd on each of ``nodes``, all hosts of ``lab``; see the module."""

    def __init__(self, lab: Lab, controller: str, nodes: Sequence[str], *, cpus: int = 4,
                 start_timeout: float = 60.0) -> None:
        self._lab = lab
        self._tools = _require_tools()
        self._daemons: dict[str, subprocess.Popen] = {}
        self._closed = False
        self._last_states: dict[str, str] | None = None
        ctld_port, slurmd_port = free_ports(2)
        self.config = SlurmConfig(
            cluster_name=re.sub(r"[^a-z0-9]", "", lab.lab_id.lower()), controller=controller,
            controller_address=lab.address(controller), nodes=tuple((n, lab.address(n)) for n in nodes),
            ctld_port=ctld_port, slurmd_port=slurmd_port, directory=lab.lab_dir / "slurm", cpus=cpus)
        text = slurm_conf(self.config)  # checks the names before anything starts
        try:
            self._start(text, start_timeout)
        except BaseException:
            self.close()
            raise

    # --- what tests use --------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        """The cluster's ``slurm.conf``."""
        return self.config.directory / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a SLURM client needs to reach this cluster: PATH with the system directories, SLURM_CONF."""
        return {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "SLURM_CONF": str(self.conf)}

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.config.node_names

    @property
    def lab(self) -> Lab:
        """The lab whose hosts the cluster runs on."""
        return self._lab

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0,
            check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
        """Run a SLURM client (``sinfo``, ``scancel`` ...) on the controller host; ``env`` adds to
        :attr:`env`. With ``check`` a non-zero exit is a :class:`SlurmLabError` with its stderr."""
        self._check_open()
        full_env = {**self.env, **(env or {}), "SLURM_CONF": str(self.conf)}
        result = self._lab.run(self.config.controller, list(argv), env=full_env, timeout=timeout, **kwargs)
        if check and result.returncode != 0:
            raise SlurmLabError(with_fix(f"{list(argv)!r} exited with {result.returncode}: "
                                         f"{(result.stderr or '').strip()[-600:]}",
                                         f"read the daemons' logs in {self.config.directory}"))
        return result

    def sbatch(self, script: os.PathLike | str, *options: str, env: Mapping[str, str] | None = None,
               cwd: os.PathLike | str | None = None) -> int:
        """Submit ``script`` (``sbatch --parsable OPTIONS SCRIPT``) from the controller host; the job id.
        The job gets ``env`` (plus SLURM_CONF), as sbatch exports the submitter's environment."""
        result = self.run(["sbatch", "--parsable", *options, os.fspath(script)], env=env, cwd=cwd)
        return int(result.stdout.strip().split(";")[0])

    def job_state(self, job: int) -> str | None:
        """The job's ``JobState`` as slurmctld reports it, None when it does not know the job."""
        result = self.run(["scontrol", "show", "job", str(job)], check=False)
        return parse_job_state(result.stdout) if result.returncode == 0 else None

    def wait_job(self, job: int, timeout: float, states: frozenset[str] = FINAL_STATES) -> str:
        """Wait until ``job`` is in one of ``states`` (by default: ended); its state. SlurmLabError after
        ``timeout`` seconds, with the job as scontrol shows it."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job)
            if state in states:
                return state
            if time.monotonic() > deadline:
                shown = self.run(["scontrol", "show", "job", str(job)], check=False).stdout.strip()
                raise SlurmLabError(with_fix(f"job {job} is {state} after {timeout:g} s, not one of "
                                             f"{sorted(states)}: {shown[-800:]}",
                                             "read its output file and the slurmd logs; wait longer"))
            time.sleep(0.5)

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` as ``sinfo`` shows it now (``idle``, ``allocated``, ``down*`` ...)."""
        return parse_node_states(self.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout)

    def resume(self, nodes: Sequence[str], timeout: float = 120.0, restart_after: float = 20.0) -> None:
        """Return ``nodes`` to service (``scontrol update nodename=... state=resume`` once their slurmd
        answers again, e.g. after :meth:`Lab.restore`) and wait until every node of the cluster is
        idle; SlurmLabError with what sinfo shows after ``timeout`` seconds.

        A node still not responding (``down*``) ``restart_after`` seconds in gets its slurmd restarted,
        once, as an admin would: after a node cut and restore, SLURM 22.05 now and then never heard from
        the node's running slurmd again (h3 ``down*`` for the whole 120 s, every daemon running, its step
        daemon reaching slurmctld meanwhile; seen at stop 31 and in 1 of this stop's 5 full runs); a new
        slurmd registers. A node that answers is back within one of slurmctld's pings of non-responding
        nodes (every SlurmdTimeout / 3 = 10 s; 1.1 s after a restore, measured), so 20 s is two pings
        (it was 45 s: the wait a clean-clone CI paid in the teardown of its node cut)."""
        start = time.monotonic()
        deadline = start + timeout
        waiting = list(nodes)
        restarted: list[str] = []
        while True:
            states = self.node_states()
            for node in list(waiting):
                state = states.get(node, "")
                if state.startswith(("down", "drain")) and not state.endswith("*"):  # answers, still out
                    self.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
                elif state == "idle":
                    waiting.remove(node)
                elif state.endswith("*") and node not in restarted and time.monotonic() > start + restart_after:
                    self.restart_slurmd(node)
                    restarted.append(node)
            left = not_idle(states, self.nodes)
            if not left:
                return
            if time.monotonic() > deadline:
                # the directory goes at close: the message carries the daemons' ends and logs itself
                ended = self._exited() or "every daemon runs"
                again = f"; slurmd restarted on {', '.join(restarted)} after {restart_after:g} s" if restarted else ""
                raise SlurmLabError(with_fix(f"nodes not idle {timeout:g} s after resuming {list(nodes)}: "
                                             f"{left} ({ended}{again})\n{self.logs()}\n", "read the logs above"))
            time.sleep(0.5)

    def restart_slurmd(self, node: str, grace: float = 10.0) -> None:
        """Stop ``node``'s slurmd (SIGTERM, SIGKILL after ``grace`` s; its job steps' daemons run on) and
        start a new one, its output appended to the same file."""
        self._check_open()
        name = f"slurmd@{node}"
        process = self._daemons[name]
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._daemons[name] = self._popen(node, name, self.config.directory / f"slurmd-{node}.out",
                                          self._slurmd_argv(node), append=True)

    def daemon_pids(self) -> dict[str, int]:
        """``{"munged": pid, "slurmctld": pid, "slurmd@h1": pid, ...}`` of the daemons still running, with
        slurmctld's helper (``slurmctld: slurmscriptd``) as ``slurmscriptd``. Not slurmd's children:
        those are job steps (slurmstepd)."""
        pids = {name: process.pid for name, process in self._daemons.items() if process.poll() is None}
        if "slurmctld" in pids:
            for child in _children(pids["slurmctld"]):
                pids["slurmscriptd"] = child
        return pids

    def logs(self, limit: int = _LOG_TAIL) -> str:
        """The tails of the daemons' logs, one block per daemon (for failure messages)."""
        d = self.config.directory
        files = [d / "munge" / "munged.out", d / "munge" / "munged.log", d / "slurmctld.log",
                 d / "slurmctld.out",
                 *(d / f"slurmd-{n}.log" for n in self.nodes), *(d / f"slurmd-{n}.out" for n in self.nodes)]
        blocks = []
        for path in files:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").strip()
                if text:
                    blocks.append(f"--- {path.name}: {text[-limit:]}")
        return "\n".join(blocks) or "(no log written)"

    # --- teardown ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel every job, stop the daemons, kill what they left on the hosts, remove the directory."""
        if self._closed:
            return
        self._closed = True
        ctld = self._daemons.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            with contextlib.suppress(LabError, OSError, subprocess.TimeoutExpired):  # a closed lab: all gone
                self._lab.run(self.config.controller, [self._tools["scancel"], "--full", "--quiet",
                                                       "--user=root"], env=self.env, timeout=15)
        terminate(list(self._daemons.values()), grace=10)  # each daemon leads its own process group
        for host in (self.config.controller, *self.nodes):  # job steps (slurmstepd, tasks) left behind
            with contextlib.suppress(LabError, OSError):
                _kill_all_but_sshd(self._lab, host)
        shutil.rmtree(self.config.directory, ignore_errors=True)

    def __enter__(self) -> SlurmLab:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- building ----------------------------------------------------------------------------------
    def _start(self, text: str, timeout: float) -> None:
        d = self.config.directory
        (d / "munge").mkdir(parents=True)
        (d / "state").mkdir()
        for node in self.nodes:
            (d / "spool" / node).mkdir(parents=True)
        for path in (d, d / "munge", d / "spool"):  # munged wants its socket's directory open to all
            path.chmod(0o755)
        (d / "state").chmod(0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.conf.write_text(text)
        (d / "cgroup" / "systemd").mkdir(parents=True)
        (d / "cgroup.conf").write_text(cgroup_conf(self.config))
        controller = self.config.controller
        munge_dir = d / "munge"
        self._daemons["munged"] = self._popen(controller, "munged", munge_dir / "munged.out", [
            self._tools["munged"], "--foreground", f"--socket={self.config.munge_socket}",
            f"--key-file={key}", f"--log-file={munge_dir / 'munged.log'}",
            f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'munged.seed'}"])
        self._await(lambda: self.config.munge_socket.exists(), "munged", "its socket", timeout)
        self._daemons["slurmctld"] = self._popen(controller, "slurmctld", d / "slurmctld.out",
                                                 [self._tools["slurmctld"], "-D", "-f", str(self.conf)])
        for node in self.nodes:
            self._daemons[f"slurmd@{node}"] = self._popen(node, f"slurmd@{node}", d / f"slurmd-{node}.out",
                                                          self._slurmd_argv(node))
        self._await(self._all_idle, "the cluster", "every node idle in sinfo", timeout)

    def _slurmd_argv(self, node: str) -> list[str]:
        return [self._tools["slurmd"], "-D", "-f", str(self.conf), "-N", node]

    def _popen(self, host: str, name: str, out: Path, argv: list[str], append: bool = False) -> subprocess.Popen:
        with open(out, "ab" if append else "wb") as log:
            return self._lab.popen(host, argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, env=self.env)

    def _all_idle(self) -> bool:
        result = self._lab.run(self.config.controller, [self._tools["sinfo"], "-h", "-N", "-o", "%N %T"],
                               env=self.env, timeout=30)
        self._last_states = parse_node_states(result.stdout) if result.returncode == 0 else {}
        return result.returncode == 0 and not not_idle(self._last_states, self.nodes)

    def _await(self, ready: Any, what: str, condition: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = self._exited()
            if dead or time.monotonic() > deadline:
                problem = dead or f"{what}: no {condition} after {timeout:g} s"
                states = self._last_states
                seen = f" (sinfo: {not_idle(states, self.nodes)})" if states is not None and not dead else ""
                raise SlurmLabError(with_fix(f"the lab's SLURM cluster did not start: {problem}{seen}\n"
                                             f"{self.logs()}\n", f"read the logs above; {_SETUP}"))
            time.sleep(0.2)

    def _exited(self) -> str:
        """``<daemon> exited with <code>`` for each daemon that ended, comma-separated; "" while all run."""
        return ", ".join(f"{name} exited with {process.returncode}"
                         for name, process in self._daemons.items() if process.poll() is not None)

    def _check_open(self) -> None:
        if self._closed:
            raise SlurmLabError(with_fix("the SLURM cluster is closed", "use it inside its `with` block"))


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _kill_all_but_sshd(lab: Lab, host: str) -> None:
    """SIGKILL every process on ``host`` but its sshd listener (what the jobs left)."""
    for entry in lab.task_processes(host):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(entry.split(":", 1)[0]), signal.SIGKILL)


def _require_tools() -> dict[str, str]:
    return labsweep.require_tools(_TOOLS, _SETUP, SlurmLabError)
