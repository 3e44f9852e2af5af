"""The multi-host backends by name: one table that ``tfdist launch --backend`` and the advisor read.

TensorFlow-free on purpose: the strategy registry (:mod:`tfdist.strategies.registry`) is filled when
``tfdist.strategies.load_backends()`` imports the backend modules, which imports TensorFlow, so the
CLI cannot ask it at import time. A test (tests/launch/test_backends.py) pins that every name here is
a registered strategy, so the table and the registry cannot drift apart.

    LAUNCHABLE  # ('parameter_server', 'multi_worker_mirrored', 'horovod'): `tfdist launch --backend`
    MODELLED    # the backends `tfdist advise` predicts and recommends
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    """One backend: ``name`` (its strategy's registry name), how ``tfdist launch`` starts it
    (``tf_cluster``: one process per task with its TF_CONFIG; ``horovodrun``), and whether the
    advisor's cost model (:mod:`tfdist.advise.cost`) predicts it."""

    name: str
    launcher: str
    modelled: bool = True


#: In ``tfdist launch --backend`` order (the first is its default).
TABLE = (
    Backend("parameter_server", "tf_cluster"),
    Backend("multi_worker_mirrored", "tf_cluster"),
    Backend("horovod", "horovodrun"),
)
LAUNCHABLE = tuple(backend.name for backend in TABLE)
MODELLED = tuple(backend.name for backend in TABLE if backend.modelled)
