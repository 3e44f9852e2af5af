"""What ``tfdist launch`` checks before anything starts: sizes, hosts, placement, Horovod's ranks. Pure.

Every function raises :class:`~tfdist.launch.plan.LaunchError` (or its ``HostsError``) with one line
naming the option and the fix, and touches no process, socket or file, so a request that cannot
work fails at once, before ports are reserved or ssh is run. The size limit is tf-config's
(:data:`tfdist.cluster.limits.MAX_TASKS`), so ``tfdist tf-config`` and ``tfdist launch`` accept the
same clusters.

    check_host_options(hosts="h1:1,h2:1", chief_host=None, ps_hosts=None)
    check_cluster_size(workers=2, ps=1, evaluator=False, chief=True)
    check_placement("h1:1,h2:1,h3:1", workers=2, ps=1)
    ranks = horovod_ranks("h1:2,h2:2", num_proc=None, elastic=False)   # 4
"""
from __future__ import annotations

from tfdist.cluster.limits import MAX_TASKS, limit_text
from tfdist.launch.hosts import HostsError, check_reachable_names, parse_hosts, place_tasks, total_slots
from tfdist.launch.plan import LaunchError

__all__ = ["MAX_TASKS", "check_cluster_size", "check_host_options", "check_placement", "horovod_ranks"]


def check_host_options(hosts: str | None, chief_host: str | None = None, ps_hosts: str | None = None) -> None:
    """Refuse an empty ``--hosts``, ``--chief-host`` or ``--ps-hosts`` (given, but with nothing in it:
    never read as "no hosts", which would run everything on this machine) and a ``--hosts`` list that
    does not parse."""
    for flag, text, example in (("--hosts", hosts, "h1:2,h2:2,h3:1"), ("--chief-host", chief_host, "h1"),
                                ("--ps-hosts", ps_hosts, "h3")):
        if text is not None and not text.strip():
            raise HostsError(f"{flag} is empty; fix: give e.g. {flag} {example}, or drop {flag} "
                             + ("to run every task on this machine" if flag == "--hosts" else
                                "for the default placement"))
    if hosts is not None:
        parse_hosts(hosts)


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
