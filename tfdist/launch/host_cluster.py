"""A tf.distribute cluster on ``--hosts``, prepared: hosts parsed, tasks placed, every host checked
over ssh, the tasks planned. Nothing is started; ``tfdist.launch.local`` runs the tasks.

Above the pieces it joins (``hosts``: parsing and placement; ``remote``: ssh and the preflight;
``plan``: the task processes), so none of them imports another.
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from tfdist.cluster import ClusterSpec
from tfdist.launch.hosts import check_reachable_names, parse_hosts, place_tasks
from tfdist.launch.commands import TaskProcess, plan_host_cluster
from tfdist.launch.remote import SshOptions, forwarded_env, is_local_host, run_preflight


def prepare_host_cluster(command: Sequence[str], hosts: str, workers: int, ps: int,
                         environ: Mapping[str, str], cwd: str, evaluator: bool = False, chief: bool = True,
                         chief_host: str | None = None,
                         ps_hosts: str | None = None, options: SshOptions = SshOptions(), bind: bool = True,
                         grace: float = 5.0) -> tuple[ClusterSpec, list[TaskProcess]]:
    """Parse ``--hosts``, place the tasks, check every host that gets one (free ports, the venv,
    the bind shim) and plan the tasks; nothing is started. ``chief=False``: peer workers only.

        spec, tasks = prepare_host_cluster(["python", "train.py"], "h1:1,h2:1,h3:1", workers=2, ps=1,
                                           environ=os.environ, cwd=os.getcwd())
    """
    parsed = parse_hosts(hosts)
    check_reachable_names(parsed)
    placements = place_tasks(parsed, workers, ps, evaluator=evaluator, chief=chief,
                             chief_host=chief_host, ps_hosts=ps_hosts)
    counts = Counter(placement.host for placement in placements)
    local = {host for host in counts if is_local_host(host)}
    answers = run_preflight(counts, options, shim=bind, local_hosts=local, cwd=cwd,
                            command=command[0] if command else None, path=forwarded_env(environ).get("PATH"))
    ports = {host: answers[host]["ports"] for host in counts}
    return plan_host_cluster(command, placements, ports, environ, cwd, options, bind=bind, grace=grace,
                             local_hosts=local)
