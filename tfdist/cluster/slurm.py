"""TF_CONFIG of the current SLURM task, computed from the variables ``srun`` sets. Reads, never writes.

Role rule, over SLURM task ids (``SLURM_PROCID``) 0..N-1:

* task 0 is the chief when ``chief=True``, otherwise worker 0;
* the next `ps` tasks (1..ps) are ps 0..ps-1;
* every remaining task is a worker, in task-id order.

Placement assumes SLURM's default *block* distribution: the first tasks fill the first node
(``SLURM_TASKS_PER_NODE``, e.g. ``2(x3),1``), and so on. The k-th task on a node listens on
``port + k``, so tasks sharing a node never share a port.

>>> env = {"SLURM_JOB_NODELIST": "node[1-3]", "SLURM_NTASKS": "3", "SLURM_PROCID": "2"}
>>> slurm_tf_config(env, ps=1, port=2222, chief=True)["task"]
{'type': 'worker', 'index': 0}
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tfdist.errors import TfdistError
from tfdist.cluster.errors import ClusterConfigError, Problem, shown
from tfdist.cluster.limits import MAX_DIGITS, MAX_TASKS, limit_text
from tfdist.cluster.spec import CHIEF, PS, TASK_TYPES, WORKER, Address, ClusterSpec
from tfdist.cluster.tf_config import tf_config_for
from tfdist.cluster.validate import check

SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST"
SLURM_PROCID = "SLURM_PROCID"
SLURM_NTASKS = "SLURM_NTASKS"
SLURM_TASKS_PER_NODE = "SLURM_TASKS_PER_NODE"
SLURM_NTASKS_PER_NODE = "SLURM_NTASKS_PER_NODE"
_HINT = "run inside an allocation with srun (e.g. 'srun --ntasks=4 ...'), which sets it"


class HostlistError(TfdistError, ValueError):
    """A SLURM hostlist or task count that tfdist cannot read (the message says where)."""


def expand_hostlist(text: str) -> list[str]:
    """Expand a SLURM hostlist such as ``node[01-03,07],gpu5`` into host names, in order.

    Several bracket groups in one name multiply out (``r[1-2]n[1-2]`` gives four hosts); zero
    padding follows the lower bound (``01-03`` gives ``01, 02, 03``). Raises ValueError on bad syntax,
    and when the list names more than MAX_TASKS hosts (counted before anything is expanded).

    >>> expand_hostlist("node[01-03,07],gpu5")
    ['node01', 'node02', 'node03', 'node07', 'gpu5']
    """
    items = _split_top_level(text)
    total = 0
    for item in items:
        if not item:
            raise HostlistError(f"empty host name in {shown(text)}")
        total += _count_item(item)
        if total > MAX_TASKS:
            raise HostlistError(f"the hostlist is too large: it names more than {limit_text(MAX_TASKS)} hosts, "
                             "tfdist's limit")
    hosts: list[str] = []
    for item in items:
        hosts += _expand_item(item)
    return hosts


def parse_tasks_per_node(text: str) -> list[int]:
    """Expand SLURM's compressed count list: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    number = r"([0-9]{1,%d})" % MAX_DIGITS
    for part in text.split(","):
        match = re.fullmatch(number + r"(?:\(x" + number + r"\))?", part.strip())
        if not match:
            raise HostlistError(f"{shown(part)} is not COUNT or COUNT(xREPEAT)")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        if count > MAX_TASKS or len(counts) + repeat > MAX_TASKS:  # before building the list
            raise HostlistError(f"{shown(part)} places more than {limit_text(MAX_TASKS)} tasks or nodes, "
                             "tfdist's limit")
        counts += [count] * repeat
    return counts


def slurm_cluster(environ: Mapping[str, str], ps: int = 0, port: int = 2222,
                  chief: bool = False) -> tuple[ClusterSpec, tuple[str, int]]:
    """The whole cluster and this process's ``(task_type, index)``, following the module's role rule."""
    problems: list[Problem] = []
    nodes = _read(environ, SLURM_JOB_NODELIST, expand_hostlist, problems, "e.g. 'node[01-04]'")
    ntasks = _read(environ, SLURM_NTASKS, _positive_int, problems, "a whole number >= 1")
    procid = _read(environ, SLURM_PROCID, _natural_int, problems, "a whole number >= 0")
    if ntasks is not None and ntasks > MAX_TASKS:
        problems.append(Problem(SLURM_NTASKS, f"is {ntasks:,}; tfdist's limit is {limit_text(MAX_TASKS)} "
                                "tasks "
                                "per cluster", f"run at most {limit_text(MAX_TASKS)} tasks"))
    if problems:
        raise ClusterConfigError(problems)
    per_node = _tasks_per_node(environ, nodes, ntasks)
    if procid >= ntasks:
        raise ClusterConfigError([Problem(SLURM_PROCID, f"is {procid} but {SLURM_NTASKS} is {ntasks}",
                                          f"{SLURM_PROCID} must be below {SLURM_NTASKS}; {_HINT}")])
    if ps < 0 or ntasks < 1 + ps + (1 if chief else 0):
        need = 1 + ps + (1 if chief else 0)
        roles = f"{'a chief, ' if chief else ''}{ps} ps and at least one worker"
        raise ClusterConfigError([Problem(SLURM_NTASKS, f"is {ntasks}, but {roles} need {need} tasks",
                                          f"run with --ntasks={need} or more, or ask for fewer ps tasks")])
    lists: dict[str, list[Address]] = {t: [] for t in TASK_TYPES}
    me = ("", 0)
    rank = 0
    for node, count in zip(nodes, per_node, strict=True):
        for local in range(count):
            role = _role(rank, ps, chief)
            if rank == procid:
                me = (role, len(lists[role]))
            lists[role].append(Address(node, port + local))
            rank += 1
    return check(ClusterSpec(**lists)), me


def slurm_tf_config(environ: Mapping[str, str], ps: int = 0, port: int = 2222,
                    chief: bool = False) -> dict[str, Any]:
    """The TF_CONFIG of the SLURM task described by `environ` (pass ``os.environ``)."""
    spec, (task_type, index) = slurm_cluster(environ, ps=ps, port=port, chief=chief)
    return tf_config_for(spec, task_type, index)


def _role(rank: int, ps: int, chief: bool) -> str:
    if rank == 0:
        return CHIEF if chief else WORKER
    return PS if rank <= ps else WORKER


def _tasks_per_node(environ: Mapping[str, str], nodes: list[str], ntasks: int) -> list[int]:
    """Tasks on each node, from SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE, else one per node."""
    if SLURM_TASKS_PER_NODE in environ:
        name = SLURM_TASKS_PER_NODE
        try:
            counts = parse_tasks_per_node(environ[name])
        except ValueError as exc:
            raise ClusterConfigError([Problem(name, f"{shown(environ[name])} is garbled: {exc}",
                                              f"it should look like '2(x3),1'; {_HINT}")]) from None
    elif SLURM_NTASKS_PER_NODE in environ:
        name = SLURM_NTASKS_PER_NODE
        try:
            per = _positive_int(environ[name])
        except ValueError:
            raise ClusterConfigError([Problem(
                name, f"{shown(environ[name])} is not a whole number >= 1",
                f"unset it or set it to the tasks per node; {_HINT}")]) from None
        counts = [min(per, max(0, ntasks - i * per)) for i in range(len(nodes))]
    else:
        name = SLURM_TASKS_PER_NODE
        counts = [1] * len(nodes)
    if len(counts) != len(nodes) or sum(counts) != ntasks:
        raise ClusterConfigError([Problem(
            name, f"places {sum(counts)} tasks on {len(counts)} node(s), but {SLURM_NTASKS}={ntasks} and "
            f"{SLURM_JOB_NODELIST} has {len(nodes)} node(s)",
            f"set {SLURM_TASKS_PER_NODE} as srun does (e.g. '2(x2)'); {_HINT}")])
    return counts


def _read(environ: Mapping[str, str], name: str, parse: Any, problems: list[Problem], expected: str) -> Any:
    if name not in environ:
        problems.append(Problem(name, "is not set", _HINT))
        return None
    try:
        return parse(environ[name])
    except ValueError as exc:
        problems.append(Problem(name, f"{shown(environ[name])} is garbled ({exc}); expected {expected}",
                                _HINT))
        return None


def _positive_int(text: str) -> int:
    value = _natural_int(text)
    if value < 1:
        raise HostlistError("must be at least 1")
    return value


def _natural_int(text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text.strip()):
        raise HostlistError("not a whole number")
    if len(text.strip()) > MAX_DIGITS:
        raise HostlistError(f"more than {MAX_DIGITS} digits")
    return int(text)


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            if depth:
                raise HostlistError(f"nested '[' in {shown(text)}")
            depth = 1
        elif char == "]":
            if not depth:
                raise HostlistError(f"']' without '[' in {shown(text)}")
            depth = 0
        if char == "," and not depth:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise HostlistError(f"'[' without ']' in {shown(text)}")
    items.append(current)
    return items


def _expand_item(item: str) -> list[str]:
    match = re.match(r"([^\[]*)\[([^\]]*)\](.*)\Z", item)
    if not match:
        return [item]
    prefix, ranges, rest = match.groups()
    tails = _expand_item(rest) if rest else [""]
    return [f"{prefix}{number}{tail}" for number in _expand_ranges(ranges, item) for tail in tails]


def _ranges(ranges: str, item: str) -> list[tuple[str, int, int]]:
    """``"01-03,7"`` -> ``[("01", 1, 3), ("7", 7, 7)]``, checked; nothing expanded."""
    parts = []
    for part in ranges.split(","):
        match = re.fullmatch(r"([0-9]{1,%d})(?:-([0-9]{1,%d}))?" % (MAX_DIGITS, MAX_DIGITS), part)
        if not match:
            raise HostlistError(f"{shown(part)} in {shown(item)} is not N or N-M (numbers of at most "
                             f"{MAX_DIGITS} "
                             "digits)")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if high < low:
            raise HostlistError(f"range {shown(part)} in {shown(item)} goes backwards")
        parts.append((match.group(1), low, high))
    return parts


def _count_item(item: str) -> int:
    """How many hosts one comma-free item names, without expanding it (stops once above the limit)."""
    count = 1
    for group in re.finditer(r"\[([^\]]*)\]", item):
        count *= sum(high - low + 1 for _, low, high in _ranges(group.group(1), item))
        if count > MAX_TASKS:
            return count
    return count


def _expand_ranges(ranges: str, item: str) -> list[str]:
    return [str(n).zfill(len(text))
            for text, low, high in _ranges(ranges, item) for n in range(low, high + 1)]


def allocation_hosts(environ: Mapping[str, str]) -> str | None:
    """The hosts of the SLURM allocation this runs in, as ``--hosts`` takes them (``node1:2,node2:2``):
    ``SLURM_JOB_NODELIST`` expanded, each node's slots from ``SLURM_TASKS_PER_NODE`` (one each
    without it). None outside an allocation; a garbled variable raises :class:`ClusterConfigError`
    naming it.

    >>> allocation_hosts({"SLURM_JOB_NODELIST": "h[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"})
    'h1:2,h2:2,h3:1'
    """
    text = environ.get(SLURM_JOB_NODELIST)
    if text is None:
        return None
    try:
        nodes = expand_hostlist(text)
    except ValueError as exc:
        raise ClusterConfigError([Problem(SLURM_JOB_NODELIST, f"{shown(text)} is garbled: {exc}",
                                          "it should look like 'node[01-04]'; or pass --hosts")]) from None
    if not nodes:
        raise ClusterConfigError([Problem(SLURM_JOB_NODELIST, "names no node", "pass --hosts")])
    counts = [1] * len(nodes)
    if SLURM_TASKS_PER_NODE in environ:
        try:
            counts = parse_tasks_per_node(environ[SLURM_TASKS_PER_NODE])
        except ValueError as exc:
            raise ClusterConfigError([Problem(SLURM_TASKS_PER_NODE, f"{shown(environ[SLURM_TASKS_PER_NODE])} is "
                                              f"garbled: {exc}", "it should look like '2(x3),1'; or pass --hosts")]) from None
        if len(counts) != len(nodes) or 0 in counts:
            raise ClusterConfigError([Problem(
                SLURM_TASKS_PER_NODE, f"gives {len(counts)} count(s) for the {len(nodes)} node(s) of "
                f"{SLURM_JOB_NODELIST}" + (" and a node with 0 tasks" if 0 in counts else ""),
                "it should have one count (at least 1) per node, as SLURM sets it; or pass --hosts")])
    return ",".join(f"{node}:{count}" for node, count in zip(nodes, counts))
