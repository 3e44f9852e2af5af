"""``--hosts h1:2,h2:2,h3:1``: parse the host list and place a cluster's tasks on it. Pure functions.

Default placement (``place_tasks``). A slot is a process that trains: every worker, ps and
evaluator takes one; the chief of a parameter-server cluster is the coordinator, which schedules
steps and runs none, so it takes no slot:

=========  ==========================================================================================
task       goes to
=========  ==========================================================================================
chief      ``--chief-host`` (default: the first host)
ps         ``--ps-hosts`` round-robin (default: the hosts from the last one backwards), skipping
           hosts whose slots are full
worker     the remaining slots, in host order
evaluator  the next free slot, in host order
=========  ==========================================================================================

So ``--hosts a:2,b:2,c:1 --workers 4 --ps 1`` puts the chief on ``a``, ps:0 on ``c`` and the
workers on ``a``, ``a``, ``b``, ``b``. More tasks than slots is an error, never an oversubscribed host.

>>> hosts = parse_hosts("a:2,b:2,c:1")
>>> [(t.task_type, t.index, t.host) for t in place_tasks(hosts, workers=4, ps=1)]
[('chief', 0, 'a'), ('worker', 0, 'a'), ('worker', 1, 'a'), ('worker', 2, 'b'), ('worker', 3, 'b'), ('ps', 0, 'c')]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tfdist.cluster.spec import host_problem
from tfdist.launch.errors import LaunchError

MAX_SLOTS = 1024  # per host; a typo such as h1:20000 is refused, not planned


class HostsError(LaunchError):
    """A ``--hosts`` list (or ``--chief-host`` / ``--ps-hosts``) that cannot be used."""


@dataclass(frozen=True)
class HostSlots:
    """One ``HOST:SLOTS`` entry of ``--hosts``."""

    host: str
    slots: int


@dataclass(frozen=True)
class Placement:
    """One task and the host it runs on."""

    task_type: str
    index: int
    host: str

    @property
    def name(self) -> str:
        return f"{self.task_type}:{self.index}"


class HostList(str):
    """The ``--hosts`` text, parsed once: still the text (what horovodrun's ``-H``, the messages and every
    function that takes ``--hosts`` read), with its entries in ``slots``; :func:`parse_hosts` of one
    returns them without parsing again. A str, so a caller handed the text and one handed a HostList
    see the same value.

    >>> hosts = HostList.parse("a:2,b")
    >>> hosts.slots
    (HostSlots(host='a', slots=2), HostSlots(host='b', slots=1))
    >>> HostList.of([HostSlots("b", 1)])
    'b:1'
    """

    slots: tuple[HostSlots, ...]

    def __new__(cls, text: str, slots: Sequence[HostSlots]) -> HostList:
        hosts = super().__new__(cls, text)
        hosts.slots = tuple(slots)
        return hosts

    @classmethod
    def parse(cls, text: str, flag: str = "--hosts") -> HostList:
        """``text`` parsed (:func:`parse_hosts`, its :class:`HostsError`), kept beside its entries."""
        return text if isinstance(text, HostList) else cls(text, parse_hosts(text, flag))

    @classmethod
    def of(cls, slots: Sequence[HostSlots]) -> HostList:
        """The list of ``slots`` as ``--hosts`` writes it: ``h1:2,h2:1``."""
        return cls(",".join(f"{entry.host}:{entry.slots}" for entry in slots), slots)


def parse_hosts(text: str, flag: str = "--hosts") -> tuple[HostSlots, ...]:
    """``"h1:2,h2:2,h3"`` as ``(HostSlots("h1", 2), ...)``; a host without ``:SLOTS`` has 1 slot; a
    :class:`HostList` gives its entries, parsed once.

    Refuses an empty list, a host listed twice, a bad host name and slots that are not 1 or more.
    """
    if isinstance(text, HostList):
        return text.slots
    example = "e.g. h1:2,h2:2,h3:1"
    if not text or not text.strip():
        raise HostsError(f"{flag} is empty; fix: list HOST:SLOTS entries separated by commas, {example}")
    entries: list[HostSlots] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            raise HostsError(f"{flag} {_short(text)!r} has an empty entry; fix: remove the extra comma, "
                             f"{example}")
        host, colon, slots_text = entry.rpartition(":") if ":" in entry else (entry, "", "1")
        if colon and not (slots_text.isascii() and slots_text.isdigit()):
            raise HostsError(f"{flag} entry {_short(entry)!r} has slots {_short(slots_text)!r}, which is not "
                             f"a whole number; fix: write HOST:SLOTS, {example}")
        slots = int(slots_text) if len(slots_text) <= 6 else MAX_SLOTS + 1
        if not 1 <= slots <= MAX_SLOTS:
            raise HostsError(f"{flag} entry {_short(entry)!r} has {_short(slots_text)} slots; fix: give each "
                             f"host 1 to {MAX_SLOTS} slots (one per task it runs)")
        reason = host_problem(host) if host else "the host is empty"
        if reason is not None or ":" in host:
            why = reason or "IPv6 addresses are not supported here"
            raise HostsError(f"{flag} entry {_short(entry)!r}: {why}; fix: use the host's DNS name (as ssh "
                             "reaches it) or its IPv4 address")
        if any(known.host == host for known in entries):
            raise HostsError(f"{flag} lists host {host!r} twice; fix: list each host once with all its "
                             f"slots, e.g. {host}:2")
        entries.append(HostSlots(host, slots))
    return tuple(entries)


def check_reachable_names(hosts: Sequence[HostSlots]) -> None:
    """Refuse ``localhost`` (or a 127.x address) beside other hosts: TF_CONFIG names every task by
    its ``--hosts`` entry, and on another host ``localhost`` is that host itself."""
    loopback = [h.host for h in hosts if h.host.lower() == "localhost" or h.host.startswith("127.")]
    if loopback and len(hosts) > 1:
        raise HostsError(f"--hosts lists {loopback[0]!r} beside other hosts, which would reach themselves "
                         "under that name; fix: name this machine as the other hosts reach it (its host "
                         "name or address)")


def _short(text: str, limit: int = 80) -> str:
    """``text``, cut to ``limit`` characters for a message."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _names(text: str | None, hosts: Sequence[HostSlots], flag: str) -> list[str] | None:
    if text is None:
        return None
    names = [name.strip() for name in text.split(",")]
    known = [h.host for h in hosts]
    if not any(names):
        raise HostsError(f"{flag} is empty; fix: name hosts of --hosts ({_short(','.join(known))}), or drop "
                         f"{flag}")
    if not all(names):
        raise HostsError(f"{flag} {_short(text)!r} has an empty entry; fix: remove the extra comma")
    for name in names:
        if name not in known:
            raise HostsError(f"{flag} names {_short(name)!r}, which is not in --hosts "
                             f"({_short(','.join(known))}); fix: pick hosts from --hosts, or add "
                             f"{_short(name)} to --hosts")
    if len(set(names)) != len(names):
        raise HostsError(f"{flag} {_short(text)!r} names a host twice; fix: name each host once")
    return names


def place_tasks(hosts: Sequence[HostSlots], workers: int, ps: int = 0, evaluator: bool = False,
                chief: bool = True, chief_host: str | None = None,
                ps_hosts: str | None = None) -> list[Placement]:
    """Every task of the cluster with its host, in task order (chief, workers, ps, evaluator).

    See the module docstring for the rules. ``chief=False`` is a peer cluster
    (MultiWorkerMirroredStrategy: workers only, filled in host order).
    """
    if not hosts:
        raise HostsError("--hosts is empty; fix: list HOST:SLOTS entries, e.g. h1:1,h2:1")
    counts = {"chief": int(chief), "worker": workers, "ps": ps, "evaluator": int(evaluator)}
    needed, available = workers + ps + int(evaluator), sum(h.slots for h in hosts)  # the chief takes none
    if needed > available:
        parts = " + ".join(f"{n} {t}" for t, n in counts.items() if n and t != "chief")
        raise HostsError(f"the job needs {needed} slots ({parts}) but --hosts gives {available}; fix: add "
                         "slots or hosts to --hosts (one slot per task), or ask for fewer tasks")
    if chief_host is not None and not chief:
        raise HostsError("--chief-host applies only to a cluster with a chief; fix: drop --chief-host")
    if ps_hosts is not None and not ps:
        raise HostsError("--ps-hosts applies only to a cluster with ps tasks; fix: drop --ps-hosts")
    free = {h.host: h.slots for h in hosts}
    order = [h.host for h in hosts]
    chosen: dict[tuple[str, int], str] = {}

    def take(task: tuple[str, int], host: str) -> None:
        free[host] -= task[0] != "chief"
        chosen[task] = host

    if chief:
        names = _names(chief_host, hosts, "--chief-host")
        if names is not None and len(names) != 1:
            raise HostsError(f"--chief-host {chief_host!r} names {len(names)} hosts; fix: name one host")
        take(("chief", 0), names[0] if names else order[0])
    candidates = _names(ps_hosts, hosts, "--ps-hosts") or order[::-1]
    turn = 0
    for index in range(ps):
        for step in range(len(candidates)):
            host = candidates[(turn + step) % len(candidates)]
            if free[host] > 0:
                take(("ps", index), host)
                turn += step + 1
                break
        else:
            raise HostsError(f"ps:{index} finds no free slot on --ps-hosts ({','.join(candidates)}); "
                             "fix: give those hosts more slots in --hosts, or name more hosts in --ps-hosts")
    rest = iter([host for host in order for _ in range(free[host])])  # the free slots, in host order
    for kind in ("worker", "evaluator"):
        for index in range(counts[kind]):
            take((kind, index), next(rest))
    return [Placement(t, i, chosen[(t, i)]) for t in counts for i in range(counts[t])]


def total_slots(hosts: Sequence[HostSlots]) -> int:
    """The number of slots ``--hosts`` gives (horovodrun's default ``-np`` with ``--hosts``)."""
    return sum(h.slots for h in hosts)
