"""The multi-host backends by name: one table that ``tfdist launch --backend``, ``--backend auto`` and the
advisor read.

TensorFlow-free on purpose: the strategy registry (:mod:`tfdist.strategies.registry`) is filled when
``tfdist.strategies.load_backends()`` imports the backend modules, which imports TensorFlow, so the
CLI cannot ask it at import time. A test (tests/launch/test_backends.py) pins that every name here is
a registered strategy, so the table and the registry cannot drift apart.

Each entry says how ``tfdist launch`` starts it (``launcher``: :data:`TF_CLUSTER`, one process per task
with its TF_CONFIG, or :data:`HOROVODRUN`), the shape of its cluster (a chief, ps tasks) and the
options it reads: giving another backend's option is refused, never ignored. Callers look a backend
up by name (:func:`backend_named`) and read these fields; no caller compares names.

    LAUNCHABLE  # ('parameter_server', 'multi_worker_mirrored', 'horovod'): `tfdist launch --backend`
    MODELLED    # the backends `tfdist advise` predicts and recommends
    backend_named("horovod").launcher   # 'horovodrun'
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from tfdist.launch.errors import LaunchError

TF_CLUSTER = "tf_cluster"  # one process per task, each with its TF_CONFIG (tfdist.launch.runners.run_tf_cluster)
HOROVODRUN = "horovodrun"  # Horovod's launcher starts the ranks (tfdist.launch.runners.run_horovodrun)
#: What reaching ``--hosts`` over ssh reads, on every backend.
SSH_OPTIONS = frozenset({"hosts", "ssh_port", "ssh_identity_file"})


@dataclass(frozen=True)
class Backend:
    """One backend: ``name`` (its strategy's registry name), how ``tfdist launch`` starts it
    (``launcher``), whether its cluster has a ``chief`` task (a coordinator; without one, worker 0
    leads its peers) and ``ps`` tasks, the ``tfdist launch`` options it reads (click's parameter
    names), and whether the advisor's cost model (:mod:`tfdist.advise.cost`) predicts it."""

    name: str
    launcher: str
    chief: bool
    ps: bool
    options: frozenset[str]
    modelled: bool = True


#: In ``tfdist launch --backend`` order (the first is its default).
TABLE = (
    Backend("parameter_server", TF_CLUSTER, chief=True, ps=True, options=frozenset({
        "workers", "ps", "evaluator", "bind_all", "task_timeout", "chief_host", "ps_hosts", *SSH_OPTIONS})),
    Backend("multi_worker_mirrored", TF_CLUSTER, chief=False, ps=False,
            options=frozenset({"workers", "bind_all", *SSH_OPTIONS})),
    Backend("horovod", HOROVODRUN, chief=False, ps=False, options=frozenset({
        "num_proc", "elastic", "min_np", "max_np", "network_interface", *SSH_OPTIONS})),
)
LAUNCHABLE = tuple(backend.name for backend in TABLE)
MODELLED = tuple(backend.name for backend in TABLE if backend.modelled)
_BY_NAME = {backend.name: backend for backend in TABLE}


def backend_named(name: str) -> Backend:
    """The backend called ``name``; an unknown name is a :class:`LaunchError` listing the known ones
    (and the closest)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), LAUNCHABLE, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise LaunchError(f"unknown backend {name!r}{hint}; fix: use one of {', '.join(LAUNCHABLE)}") from None


__all__ = ["HOROVODRUN", "LAUNCHABLE", "MODELLED", "SSH_OPTIONS", "TABLE", "TF_CLUSTER", "Backend", "backend_named"]
