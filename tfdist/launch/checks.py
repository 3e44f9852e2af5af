"""What ``tfdist launch`` checks before anything starts: sizes, hosts, placement, Horovod's ranks. Pure.

Every function raises :class:`~tfdist.launch.commands.LaunchError` (or its ``HostsError``) with one line
naming the option and the fix, and touches no process, socket or file, so a request that cannot
work fails at once, before ports are reserved or ssh is run. The size limit is tf-config's
(:data:`tfdist.cluster.limits.MAX_TASKS`), so ``tfdist tf-config`` and ``tfdist launch`` accept the
same clusters.

    check_host_options(hosts="h1:1,h2:1", chief_host=None, ps_hosts=None)
    check_cluster_size(workers=2, ps=1, evaluator=False, chief=True)
    check_placement("h1:1,h2:1,h3:1", workers=2, ps=1)
    ranks = horovod_ranks("h1:2,h2:2", num_proc=None, elastic=False)   # 4
    check_network_interface("eth0")
    check_local_command(["python", "train.py"], cwd=".")   # the script exists here
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Sequence

from tfdist.cluster.limits import MAX_TASKS, limit_text
from tfdist.launch.hosts import HostList, HostsError, check_reachable_names, parse_hosts, place_tasks, total_slots
from tfdist.launch.commands import LaunchError

__all__ = ["INTERFACE_NAME", "MAX_TASKS", "check_cluster_size", "check_host_options", "check_local_command",
           "check_network_interface", "check_placement", "horovod_ranks", "python_script"]

#: What ``--network-interface`` accepts: one Linux interface name. The kernel takes 1 to 15 bytes
#: without '/', ':' or whitespace (``dev_valid_name``, IFNAMSIZ 16); tfdist narrows that to ASCII
#: letters, digits, '.', '_' and '-' (eth0, enp0s31f6, br-1a2b, eth0.100, ib0), so a name never means
#: anything to the shell horovodrun runs its commands through. One name: horovodrun's comma-separated
#: list under this flag is deprecated.
_INTERFACE_CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
INTERFACE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
#: The file names of a Python interpreter (python, python3, python3.11): their first operand is a script.
_PYTHON = re.compile(r"python[0-9.]*")
_PYTHON_ARGUMENT_OPTIONS = frozenset({"-W", "-X", "--check-hash-based-pycs"})  # take the next argument


def check_host_options(hosts: str | None, chief_host: str | None = None,
                       ps_hosts: str | None = None) -> HostList | None:
    """Refuse an empty ``--hosts``, ``--chief-host`` or ``--ps-hosts`` (given, but with nothing in it:
    never read as "no hosts", which would run everything on this machine) and a ``--hosts`` list that
    does not parse; ``--hosts`` parsed (a :class:`HostList`, None when not given)."""
    for flag, text, example in (("--hosts", hosts, "h1:2,h2:2,h3:1"), ("--chief-host", chief_host, "h1"),
                                ("--ps-hosts", ps_hosts, "h3")):
        if text is not None and not text.strip():
            raise HostsError(f"{flag} is empty; fix: give e.g. {flag} {example}, or drop {flag} "
                             + ("to run every task on this machine" if flag == "--hosts" else
                                "for the default placement"))
    return None if hosts is None else HostList.parse(hosts)


def check_cluster_size(workers: int, ps: int = 0, evaluator: bool = False, chief: bool = True) -> int:
    """The number of tasks (chief, workers, ps, evaluator), refused above ``MAX_TASKS``."""
    tasks = int(chief) + workers + ps + int(evaluator)
    if tasks > MAX_TASKS:
        parts = " + ".join(part for part in (
            "1 chief" if chief else "", f"{workers} worker(s)", f"{ps} ps" if ps else "",
            "1 evaluator" if evaluator else "") if part)
        raise LaunchError(f"the cluster has {limit_text(tasks)} tasks ({parts}); tfdist's limit is "
                          f"{limit_text(MAX_TASKS)} tasks per cluster; fix: ask for fewer --workers or --ps")
    return tasks


def check_placement(hosts: str, workers: int, ps: int = 0, evaluator: bool = False, chief: bool = True,
                    chief_host: str | None = None, ps_hosts: str | None = None) -> None:
    """The tasks fit on ``hosts`` as ``tfdist launch --hosts`` places them (``place_tasks``);
    ``--chief-host`` and ``--ps-hosts`` name hosts of ``--hosts``."""
    parsed = parse_hosts(hosts)
    check_reachable_names(parsed)
    place_tasks(parsed, workers, ps, evaluator=evaluator, chief=chief, chief_host=chief_host,
                ps_hosts=ps_hosts)


def horovod_ranks(hosts: str | None, num_proc: int | None, elastic: bool = False, min_np: int | None = None,
                  max_np: int | None = None, default: int = 2) -> int:
    """The ``-np`` of a Horovod job: ``num_proc`` when given (``None``: not given), else the slots of
    ``hosts`` (elastic: ``--min-np``), else ``default``; refused above the slots of ``hosts``
    (horovodrun would wait for slots that never come) or above ``MAX_TASKS``."""
    if num_proc is not None and num_proc > MAX_TASKS:
        raise LaunchError(f"-np {num_proc} is above tfdist's limit of {limit_text(MAX_TASKS)} ranks; fix: "
                          f"-np {limit_text(MAX_TASKS)} or fewer")
    if hosts is None:
        return default if num_proc is None else num_proc
    slots = total_slots(parse_hosts(hosts))
    if num_proc is not None and num_proc > slots:
        fallback = f"--min-np {min_np}" if elastic else f"the {slots} slots"
        raise LaunchError(f"-np {num_proc} needs {num_proc} slots but --hosts {_short(hosts)} gives {slots}; "
                          f"fix: add slots to --hosts, or drop -np (it defaults to {fallback})")
    if elastic:
        from tfdist.launch.elastic import elastic_start_size

        if min_np is None:
            raise LaunchError("--elastic needs --min-np, the fewest ranks training may go on with; fix: add "
                              "e.g. --min-np 1")
        return elastic_start_size(hosts, min_np, max_np, num_proc)
    if num_proc is None and slots > MAX_TASKS:
        raise LaunchError(f"--hosts gives {limit_text(slots)} slots, above tfdist's limit of "
                          f"{limit_text(MAX_TASKS)} ranks; fix: give fewer slots, or -np "
                          f"{limit_text(MAX_TASKS)} or fewer")
    return slots if num_proc is None else num_proc


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_network_interface(name: str, field: str = "--network-interface") -> str:
    """``name`` when it is one interface name as ``INTERFACE_NAME`` accepts it; else a LaunchError
    naming ``field`` (``""``: the caller names it, as click does) and the fix: horovodrun would hand
    the name to a shell, or fail later with its own traceback."""
    named = f"{field} " if field else ""
    if not name.strip():
        raise LaunchError(f"{named or 'the interface name '}is empty; fix: name the interface the ranks talk "
                          "over, e.g. --network-interface eth0, or drop --network-interface")
    if INTERFACE_NAME.fullmatch(name) and name not in (".", ".."):
        return name
    foreign = set(name) - set(_INTERFACE_CHARACTERS)
    why = ("names several interfaces (horovodrun's comma list under this flag is deprecated)" if foreign == {","}
           else "is not an interface name" if foreign or name in (".", "..")
           else "is longer than the 15 characters Linux allows")
    raise LaunchError(f"{named}{_shown(name)} {why}; tfdist accepts one name of 1 to 15 ASCII letters, "
                      "digits, '.', '_' or '-'; fix: give a name that `ip -brief link` lists, e.g. "
                      "--network-interface eth0")


def python_script(command: Sequence[str]) -> str | None:
    """The script a ``python ...`` command runs (its first operand), or None: not a Python interpreter,
    or ``-c``, ``-m``, ``-`` (stdin), ``--help`` or ``--version`` instead of a file. Pure.

        python_script(["python3", "-u", "train.py", "--epochs", "2"])   # 'train.py'
    """
    if not command or not _PYTHON.fullmatch(os.path.basename(command[0])):
        return None
    arguments = iter(command[1:])
    for argument in arguments:
        if argument == "--":
            return next(arguments, None)
        if argument in ("-", "--help", "--version"):
            return None
        if argument in _PYTHON_ARGUMENT_OPTIONS:
            next(arguments, None)
        elif not argument.startswith("-"):
            return argument
        elif not argument.startswith("--"):
            for at, flag in enumerate(argument[1:], start=1):  # -u, -OO, -uc CODE, -Wignore, -W ignore
                if flag in "cm":
                    return None
                if flag in "WX":
                    if at == len(argument) - 1:
                        next(arguments, None)
                    break
    return None


def check_local_command(command: Sequence[str], cwd: str, path: str | None = None) -> None:
    """Before a run on this machine: the program exists (on ``path`` or as a file) and, for
    ``python SCRIPT``, the script exists in ``cwd``; else a LaunchError naming it and the fix (a
    Horovod job would fail in every rank with horovodrun's own traceback)."""
    if not command:
        raise LaunchError("no command to launch; fix: put it after `--`, e.g. `-- python train.py`")
    program = command[0]
    if os.sep in program:
        target = os.path.join(cwd, program)
        if not os.path.isfile(target):
            raise LaunchError(f"{_shown(program)} does not exist (from {cwd}); fix: check the path, or "
                              "give a program on PATH, e.g. `-- python3 train.py`")
        if not os.access(target, os.X_OK):
            raise LaunchError(f"{_shown(program)} is not executable; fix: chmod +x {program}, or run it "
                              f"with its interpreter, e.g. `-- {os.path.basename(sys.executable)} {program}`")
    elif shutil.which(program, path=path) is None:
        raise LaunchError(f"{_shown(program)} is not an executable on PATH; fix: give the full path, "
                          "e.g. `-- /usr/bin/python3 train.py`")
    script = python_script(command)
    if script is not None and not os.path.exists(os.path.join(cwd, script)):
        raise LaunchError(f"the script {_shown(script)} does not exist in {cwd}; fix: check its name, or "
                          "start tfdist launch from the folder that holds it")


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted as a message echoes it: ``'eth0'``, or ``'aaa...'... (300 characters)``."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"
