"""Cluster specifications: the addresses of every task of a tf.distribute cluster.

Pure data and pure functions, except :func:`free_ports`, which binds sockets.

>>> spec = ClusterSpec(chief=[Address("h1", 2222)], worker=[Address("h2", 2222)])
>>> spec.training_cluster()
{'chief': ['h1:2222'], 'worker': ['h2:2222']}
"""
from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdist.cluster.ascii_input import ascii_problem
from tfdist.cluster.errors import ClusterConfigError, Problem, field_name, shown
from tfdist.cluster.limits import MAX_TASKS, limit_text

CHIEF = "chief"
WORKER = "worker"
PS = "ps"
EVALUATOR = "evaluator"
#: Every task type, in the fixed order used by :meth:`ClusterSpec.tasks`.
TASK_TYPES: tuple[str, ...] = (CHIEF, WORKER, PS, EVALUATOR)
#: The task types that go into the ``cluster`` of TF_CONFIG (never the evaluator, tensorflow#46169).
TRAINING_TASK_TYPES: tuple[str, ...] = (CHIEF, WORKER, PS)
MIN_PORT = 1
MAX_PORT = 65535
PORT_FIX = f"use a port between {MIN_PORT} and {MAX_PORT}"

_DNS_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")


@dataclass(frozen=True)
class Address:
    """A task's ``HOST:PORT``; IPv6 hosts are stored without brackets."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @classmethod
    def parse(cls, text: Any, field: str = "address") -> Address:
        """Parse ``"HOST:PORT"`` (``"[::1]:2222"`` for IPv6); raise ClusterConfigError naming `field`.

        >>> Address.parse("[::1]:2222")
        Address(host='::1', port=2222)
        """
        address, problems = split_address(text, field)
        if address is not None:
            problems += address_problems(address, field)
        if problems:
            raise ClusterConfigError(problems)
        assert address is not None
        return address


def split_address(text: Any, field: str) -> tuple[Address | None, list[Problem]]:
    """Split ``HOST:PORT`` syntactically; host and port range are checked by :func:`address_problems`."""
    example = "write it as HOST:PORT, e.g. 'node1:2222' or '[::1]:2222'"
    if not isinstance(text, str):
        return None, [Problem(field,
                              f"expected a 'HOST:PORT' string, got {type(text).__name__} {shown(text)}",
                              "write the address as a string such as 'node1:2222'")]
    if not text:
        return None, [Problem(field, "the address is empty", example)]
    if any(c.isspace() for c in text):
        return None, [Problem(field, f"{shown(text)} contains whitespace", "remove the spaces")]
    if text.startswith("["):
        end = text.find("]")
        if end == -1:
            return None, [Problem(field, f"{shown(text)} has '[' but no ']'",
                                  "write IPv6 addresses as '[::1]:2222'")]
        host, rest = text[1:end], text[end + 1:]
        if ":" not in host:
            return None, [Problem(field, f"{shown(text)} has brackets around a host that is not IPv6",
                                  f"drop the brackets: {shown(host + rest)}")]
        if not rest.startswith(":"):
            return None, [Problem(field, f"{shown(text)} has no ':PORT' after ']'",
                                  f"add a port: '[{host}]:2222'")]
        port_text = rest[1:]
    else:
        colons = text.count(":")
        if colons == 0:
            return None, [Problem(field, f"{shown(text)} has no port",
                                  f"write it as HOST:PORT, e.g. '{text}:2222'")]
        if colons > 1:
            return None, [Problem(field, f"{shown(text)} has several ':'; IPv6 hosts need brackets",
                                  "write IPv6 addresses as '[::1]:2222'")]
        host, port_text = text.split(":")
    in_port, in_text = ascii_problem(port_text), ascii_problem(text, field, "'node1:2222'")
    if in_port is not None and in_text is not None:  # int() would read '٢٢٢٢' as 2222
        return None, [Problem(field, f"{shown(text)} has port {shown(port_text)}, which is not a number: it "
                              f"{in_port.message}", in_text.fix)]
    if not port_text.isdigit():
        return None, [Problem(field, f"{shown(text)} has port {shown(port_text)}, which is not a number",
                              PORT_FIX)]
    if len(port_text) > 5:  # never int() a 5,000-digit port
        return None, [Problem(field, f"{shown(text)} has a port of {len(port_text)} digits; ports are "
                              f"{MIN_PORT}-{MAX_PORT}", PORT_FIX)]
    return Address(host, int(port_text)), []


def address_problems(address: Address, field: str) -> list[Problem]:
    """What is wrong with an address's host and port (empty when nothing is)."""
    problems = []
    port = address.port
    is_int = isinstance(port, int) and not isinstance(port, bool)
    port_text = shown(port) if is_int and abs(port) >= 10 ** 18 else str(port)  # str() refuses huge ints
    host = address.host
    text = shown(f"[{host}]:{port_text}" if isinstance(host, str) and ":" in host else f"{host}:{port_text}")
    if not is_int:
        problems.append(Problem(field, f"{text} has port {shown(port)}, which is not an integer", PORT_FIX))
    elif not MIN_PORT <= port <= MAX_PORT:
        problems.append(Problem(field, f"{text} has port {port_text}; ports are {MIN_PORT}-{MAX_PORT}",
                                PORT_FIX))
    reason = host_problem(host)
    if reason is not None:
        problems.append(Problem(field, f"{text}: {reason}", "use a DNS name (letters, digits, '-', "
                                "dots between labels) or an IP address"))
    return problems


def host_problem(host: Any) -> str | None:
    """Why `host` is neither an RFC 1123 DNS name nor an IPv4/IPv6 address; None when it is valid."""
    if not isinstance(host, str):
        return f"host {shown(host)} is not a string"
    if not host:
        return "the host is empty"
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"host {shown(host)} is not a valid IPv6 address"
        return None
    try:
        ipaddress.IPv4Address(host)
        return None
    except ValueError:
        pass
    name = host.removesuffix(".")
    if len(name) > 253:
        return f"host name is {len(name)} characters long; DNS names have at most 253"
    labels = name.split(".")
    for label in labels:
        if not _DNS_LABEL.match(label):
            return (f"host {shown(host)} is not a valid DNS name: label {shown(label)} must be 1-63 letters, "
                    "digits "
                    "or '-', not starting or ending with '-'")
    if labels[-1].isdigit():
        return f"host {shown(host)} looks like an IPv4 address but is not a valid one"
    return None


def address_key(address: Address) -> tuple[str, int]:
    """A normalised (host, port) used to find two tasks on the same address."""
    host = address.host.lower().rstrip(".") if isinstance(address.host, str) else str(address.host)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host, address.port
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
    return str(ip), address.port


def endpoint_keys(address: Address) -> tuple[tuple[str, int], ...]:
    """Every normalised (host, port) the address may reach; two tasks sharing one share an endpoint.

    ``localhost`` (and ``*.localhost``, RFC 6761) resolves to 127.0.0.1, ::1 or both, so it collides with
    either; 127.0.0.1 and ::1 are different sockets and do not collide with each other.

    >>> endpoint_keys(Address("LocalHost", 1))
    (('127.0.0.1', 1), ('::1', 1))
    """
    host, port = address_key(address)
    if host == "localhost" or host.endswith(".localhost"):
        return (("127.0.0.1", port), ("::1", port))
    return ((host, port),)


@dataclass(frozen=True)
class ClusterSpec:
    """The addresses of every task; lists given to the constructor are stored as tuples.

    >>> ClusterSpec(worker=[Address("h", 1), Address("h", 2)]).tasks()
    [('worker', 0), ('worker', 1)]
    """

    chief: tuple[Address, ...] = ()
    worker: tuple[Address, ...] = ()
    ps: tuple[Address, ...] = ()
    evaluator: tuple[Address, ...] = ()

    def __post_init__(self) -> None:
        for task_type in TASK_TYPES:
            object.__setattr__(self, task_type, tuple(getattr(self, task_type)))

    def addresses(self, task_type: str) -> tuple[Address, ...]:
        """The addresses of one task type."""
        if task_type not in TASK_TYPES:
            raise ClusterConfigError([_unknown_type_problem("task_type", task_type)])
        return getattr(self, task_type)

    def training_cluster(self) -> dict[str, list[str]]:
        """The ``cluster`` dict of TF_CONFIG: chief, worker and ps only, never the evaluator."""
        return {t: [str(a) for a in self.addresses(t)] for t in TRAINING_TASK_TYPES if self.addresses(t)}

    def tasks(self) -> list[tuple[str, int]]:
        """Every ``(task_type, index)``, in the order chief, worker, ps, evaluator."""
        return [(t, i) for t in TASK_TYPES for i in range(len(self.addresses(t)))]

    def address_of(self, task_type: str, index: int) -> Address:
        """The address of one task; raises ClusterConfigError when there is no such task."""
        addresses = self.addresses(task_type)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(addresses):
            names = ", ".join(f"{t}:{i}" for t, i in self.tasks()) or "none"
            raise ClusterConfigError([Problem("task", f"{task_type}:{index} is not a task of this cluster "
                                              f"(its tasks: {names})", "pick one of the listed tasks")])
        return addresses[index]

    def summary(self) -> str:
        """A human summary such as ``1 chief, 2 workers, 1 ps``."""
        parts = []
        for t in TASK_TYPES:
            n = len(self.addresses(t))
            if n:
                parts.append(f"{n} {t}s" if n > 1 and t != PS else f"{n} {t}")
        return ", ".join(parts) or "no tasks"

    @classmethod
    def from_dict(cls, data: Any, evaluator: Any = None, *, field: str = "cluster",
                  allow_evaluator: bool = True) -> ClusterSpec:
        """Build a spec from ``{"chief": [...], "worker": [...], "ps": [...]}`` (the TF_CONFIG ``cluster``).

        `evaluator` is an optional ``HOST:PORT`` (or a one-element list) for the evaluator task;
        ``"evaluator"`` inside `data` is accepted only when `allow_evaluator`. Raises
        ClusterConfigError listing every malformed entry; semantic checks are :func:`validate_cluster`'s.

        >>> ClusterSpec.from_dict({"worker": ["h:1"]}, evaluator="h:2").summary()
        '1 worker, 1 evaluator'
        """
        lists, problems = parse_task_lists(data, field, allow_evaluator=allow_evaluator)
        if evaluator is not None:
            if lists.get(EVALUATOR):
                problems.append(Problem(EVALUATOR, f"the evaluator is given twice: in {field} and separately",
                                        "give it only once"))
            items = [evaluator] if isinstance(evaluator, str) else evaluator
            if not isinstance(items, (list, tuple)):
                problems.append(Problem(EVALUATOR, f"expected 'HOST:PORT', got {evaluator!r}",
                                        "write it as a string such as 'node1:2222'"))
            else:
                lists[EVALUATOR] = []
                for i, text in enumerate(items):
                    address, found = split_address(text, f"{EVALUATOR}[{i}]")
                    problems += found
                    lists[EVALUATOR].append(address)
        if problems:
            raise ClusterConfigError(problems)
        return cls(**{t: tuple(lists.get(t, ())) for t in TASK_TYPES})


TaskLists = dict[str, list[Address | None]]


def parse_task_lists(data: Any, field: str, *, allow_evaluator: bool) -> tuple[TaskLists, list[Problem]]:
    """Read ``{type: ["HOST:PORT", ...]}`` leniently: unparsable entries become None, problems collected."""
    if not isinstance(data, Mapping):
        return {}, [Problem(field, f"must be an object mapping task types to addresses, got {_kind(data)}",
                            'write it as {"worker": ["node1:2222", "node2:2222"]}')]
    lists: dict[str, list[Address | None]] = {}
    problems: list[Problem] = []
    for task_type, items in data.items():
        where = field_name(field, task_type)
        if task_type not in TASK_TYPES:
            problems.append(_unknown_type_problem(where, task_type))
            continue
        if task_type == EVALUATOR and not allow_evaluator:
            problems.append(Problem(where, "the evaluator must not be listed in the training cluster: "
                                    "ParameterServerStrategy's coordinator would wait for it forever "
                                    "(tensorflow/tensorflow#46169)",
                                    "remove 'evaluator' from cluster; the evaluator's own TF_CONFIG has "
                                    'task {"type": "evaluator", "index": 0}'))
            continue
        if not isinstance(items, (list, tuple)):
            problems.append(Problem(where, f"must be a list of 'HOST:PORT' strings, got {_kind(items)}",
                                    f"write it as {_as_list(items)}" if isinstance(items, str) and len(items) <= 80
                                    else 'write it as ["node1:2222"]'))
            continue
        if not items:
            problems.append(Problem(where, "the list is empty",
                                    f"list at least one address or remove '{task_type}'"))
            continue
        if len(items) > MAX_TASKS:  # checked before reading a single entry; counted for the role rules
            problems.append(too_many_tasks(where, len(items)))
            lists[task_type] = [None] * len(items)
            continue
        lists[task_type] = []
        for i, text in enumerate(items):
            address, found = split_address(text, f"{where}[{i}]")
            problems += found
            lists[task_type].append(address)
    return lists, problems


def too_many_tasks(field: str, count: int | str) -> Problem:
    """The problem of a cluster (or option, or hostlist) above :data:`MAX_TASKS` tasks."""
    count_text = limit_text(count) if isinstance(count, int) else count
    return Problem(field,
                   f"asks for {count_text} tasks; tfdist's limit is {limit_text(MAX_TASKS)} per cluster",
                   f"use at most {limit_text(MAX_TASKS)} tasks")


def _check_task_count(counts: Mapping[str, int]) -> None:
    total = sum(counts.values())
    if total > MAX_TASKS:
        raise ClusterConfigError([too_many_tasks("tasks", total)])


def local_cluster(workers: int, ps: int, ports: Sequence[int], host: str = "127.0.0.1", chief: bool = True,
                  evaluator: bool = False) -> ClusterSpec:
    """A cluster whose tasks all run on `host`, taking `ports` in task order (chief, workers, ps, evaluator).

    >>> local_cluster(workers=2, ps=1, ports=[5000, 5001, 5002, 5003]).training_cluster()["ps"]
    ['127.0.0.1:5003']
    """
    counts = {CHIEF: int(chief), WORKER: workers, PS: ps, EVALUATOR: int(evaluator)}
    for name, value in (("workers", workers), ("ps", ps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ClusterConfigError([Problem(name, f"must be a whole number >= 0, got {value!r}",
                                              f"pass {name}=0 or more")])
    _check_task_count(counts)
    needed = sum(counts.values())
    if len(ports) != needed:
        raise ClusterConfigError([Problem("ports", f"got {len(ports)} ports for {needed} tasks",
                                          f"pass exactly {needed} ports, e.g. free_ports({needed})")])
    it = iter(ports)
    return ClusterSpec(**{t: tuple(Address(host, next(it)) for _ in range(n)) for t, n in counts.items()})


def round_robin_cluster(hosts: Sequence[str], workers: int, ps: int = 0, port: int = 2222,
                        chief: bool = False, evaluator: bool = False) -> ClusterSpec:
    """Spread tasks over `hosts` round-robin in task order (chief, workers, ps, evaluator).

    The k-th task placed on a host (k = 0, 1, ...) gets ``port + k``, so tasks sharing a host never
    share a port.

    >>> round_robin_cluster(["a", "b"], workers=3).training_cluster()
    {'worker': ['a:2222', 'b:2222', 'a:2223']}
    """
    if not hosts:
        raise ClusterConfigError([Problem("hosts", "no hosts given", "list at least one host")])
    counts = {CHIEF: int(chief), WORKER: workers, PS: ps, EVALUATOR: int(evaluator)}
    _check_task_count(counts)  # before building anything
    used = [0] * len(hosts)
    lists: dict[str, list[Address]] = {t: [] for t in TASK_TYPES}
    n = 0
    for task_type in TASK_TYPES:
        for _ in range(counts[task_type]):
            slot = n % len(hosts)
            lists[task_type].append(Address(hosts[slot], port + used[slot]))
            used[slot] += 1
            n += 1
    return ClusterSpec(**lists)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """Ask the OS for `n` distinct free TCP ports on `host` (bind to port 0, collect, close).

    Another process may take a port between this call and its use; use the ports promptly.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets = []
    try:
        for _ in range(n):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _unknown_type_problem(field: str, task_type: Any) -> Problem:
    fix = "rename 'master' to 'chief'" if task_type == "master" else f"use one of: {', '.join(TASK_TYPES)}"
    return Problem(field, f"unknown task type {shown(task_type)}; known types are {', '.join(TASK_TYPES)}",
                   fix)


def _kind(value: Any) -> str:
    """A short description of a JSON value's type, for messages."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    echo = shown(value, limit=40)
    small = isinstance(value, (str, int, float)) and len(echo) < 40 and not echo.startswith("a number of")
    return names.get(type(value), type(value).__name__) + (f" {echo}" if small else "")


def _as_list(address: str) -> str:
    """``address`` as the one-item JSON list it should have been: ``["h:2222"]``; a character that is
    not printable (a line separator such as ``\x1e``) is escaped, so the message stays one line."""
    return json.dumps([address], ensure_ascii=not address.isprintable())
