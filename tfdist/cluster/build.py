"""A cluster from ``tfdist tf-config``'s options: explicit addresses, a cluster file, or the shorthand.

Pure (a cluster file is read, nothing is written or started): :func:`build_cluster` takes a frozen
:class:`ClusterOptions` and returns a :class:`ClusterSpec`, or raises :class:`ClusterOptionError`
naming the option to blame (None: their combination), which the command turns into its usage error.

>>> options = ClusterOptions(workers=3, hosts="a,b", given=frozenset({"workers", "hosts"}))
>>> build_cluster(options).training_cluster()
{'worker': ['a:2222', 'b:2222', 'a:2223']}
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from tfdist.cluster.errors import ClusterConfigError, ClusterOptionError, listing, shown
from tfdist.cluster.files import load_cluster_file
from tfdist.cluster.slurm import expand_hostlist
from tfdist.cluster.spec import MAX_PORT, Address, ClusterSpec, host_problem, round_robin_cluster

#: The options giving every address by hand.
EXPLICIT_OPTIONS: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")
#: The options of the shorthand (N workers spread over hosts).
SHORTHAND_OPTIONS: tuple[str, ...] = ("workers", "hosts", "ps_count", "with_chief", "with_evaluator")
DEFAULT_PORT = 2222
NO_CLUSTER = ("no cluster given; fix: pass --worker HOST:PORT (repeatable) with --chief/--ps/--evaluator, "
              "or --file CLUSTER.yaml, or --workers N --hosts h1,h2 [--ps-count M --with-chief], "
              "or --format slurm inside srun")


def flag(name: str) -> str:
    """The command-line spelling of an option's name: ``ps_count`` -> ``--ps-count``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class ClusterOptions:
    """What the user gave to describe a cluster; ``given`` names the options set on the command line
    (not left at their defaults): a cluster is given exactly one way, and ``--port`` only numbers the
    shorthand's tasks."""

    chief: Address | None = None
    worker: tuple[Address, ...] = ()
    ps: tuple[Address, ...] = ()
    evaluator: Address | None = None
    cluster_file: str | None = None
    workers: int | None = None
    hosts: str | None = None
    ps_count: int = 0
    with_chief: bool = False
    with_evaluator: bool = False
    port: int = DEFAULT_PORT
    given: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name in ("worker", "ps"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "given", frozenset(self.given))

    @classmethod
    def from_params(cls, params: Mapping[str, Any], given: Collection[str] | None = None) -> ClusterOptions:
        """From a command's parsed parameters (other keys are ignored; None means "left out").

        ``given=None`` (shell completion, where no source is known): an option counts as given when
        its value is set (not None, empty, 0 or False); ``--port`` then never does.
        """
        names = [f.name for f in dataclasses.fields(cls) if f.name != "given"]
        values = {n: params[n] for n in names if params.get(n) is not None}
        if given is None:
            given = [n for n in names if n != "port" and params.get(n) not in (None, (), False, 0)]
        return cls(**values, given=frozenset(n for n in given if n in names))


def build_cluster(options: ClusterOptions) -> ClusterSpec:
    """The cluster from exactly one source: explicit addresses, ``--file``, or the shorthand.

    Raises :class:`ClusterOptionError` (its ``option`` names the option to blame, or None) for two
    sources, none, a bad file, bad hosts, a count above the limit, or ports past 65535.
    """
    given = options.given
    explicit = [n for n in EXPLICIT_OPTIONS if n in given]
    shorthand = [n for n in SHORTHAND_OPTIONS if n in given]
    sources = [s for s, used in (("HOST:PORT options", explicit), ("--file", "cluster_file" in given),
                                 ("the --workers/--hosts shorthand", shorthand)) if used]
    if len(sources) > 1:
        raise ClusterOptionError(None, f"give the cluster one way, not with both {sources[0]} and "
                                 f"{sources[1]}; fix: keep one of them")
    if sources and not shorthand and "port" in given:
        _refuse_port(options.port, bool(explicit))
    if options.cluster_file:
        try:
            return load_cluster_file(options.cluster_file)
        except ClusterConfigError as exc:
            raise ClusterOptionError("--file", f"{options.cluster_file} is not a valid cluster file:"
                                     f"{listing(exc)}", exc.problems) from None
    if shorthand:
        return shorthand_cluster(options)
    if explicit:
        return ClusterSpec(chief=_one(options.chief), worker=options.worker, ps=options.ps,
                           evaluator=_one(options.evaluator))
    raise ClusterOptionError(None, NO_CLUSTER)


def shorthand_cluster(options: ClusterOptions) -> ClusterSpec:
    """``--workers N --hosts h1,h2`` (with ``--ps-count``, ``--with-chief``, ``--with-evaluator``,
    ``--port``): the tasks spread round-robin over the hosts, the k-th on a host at ``port + k``."""
    if options.hosts is None:
        raise ClusterOptionError("--hosts", "the shorthand needs hosts; fix: --hosts node1,node2")
    if options.workers is None:
        raise ClusterOptionError("--workers", "the shorthand needs the number of workers; fix: --workers 2")
    try:
        hosts = expand_hostlist(options.hosts)
    except ValueError as exc:
        raise ClusterOptionError("--hosts", f"{shown(options.hosts)}: {exc}; fix: write h1,h2 or node[1-3]") \
            from None
    for host in hosts:
        reason = host_problem(host)
        if reason is not None:
            raise ClusterOptionError("--hosts", f"{reason}; fix: use DNS names or IP addresses separated by "
                                     "commas")
    port = options.port or DEFAULT_PORT
    try:
        spec = round_robin_cluster(hosts, workers=options.workers, ps=options.ps_count or 0, port=port,
                                   chief=bool(options.with_chief), evaluator=bool(options.with_evaluator))
    except ClusterConfigError as exc:  # more than MAX_TASKS tasks in all
        raise ClusterOptionError(None, f"--workers, --ps-count, --with-chief and --with-evaluator: "
                                 f"{exc.details}", exc.problems) from None
    highest = max((spec.address_of(t, i).port for t, i in spec.tasks()), default=port)
    if highest > MAX_PORT:
        raise ClusterOptionError("--port", f"{port} is too high: with {len(spec.tasks())} tasks on "
                                 f"{len(hosts)} host(s) the ports go up to {highest}; fix: use a lower --port "
                                 "or more hosts")
    return spec


def _refuse_port(port: int, explicit: bool) -> NoReturn:
    """--port numbers the shorthand's and SLURM's tasks; explicit addresses and files carry their own."""
    where = ("HOST:PORT options, whose addresses carry their own ports", f"write it into each address "
             f"(--worker host:{port}) or drop --port") if explicit else (
             "--file, whose addresses carry their own ports", "write the ports in the cluster file or drop "
             "--port")
    raise ClusterOptionError("--port", f"{port} is only used by the --workers/--hosts shorthand and --format "
                             f"slurm, not with {where[0]}; fix: {where[1]}")


def _one(value: Address | None) -> tuple[Address, ...]:
    return (value,) if value is not None else ()
