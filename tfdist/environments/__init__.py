"""Detectors of where a process runs. Each reads an environment mapping and never writes it.

``detect_environment`` tries them in the order of ``DETECTION_ORDER``, the same order the
docs/strategies.md documents for ``make_strategy("auto")``.

Layering: beside ``tfdist.runtime`` and ``tfdist.plan``: it may import :mod:`tfdist.cluster` (TF_CONFIG
is parsed here, once, for the whole run) and the ground modules.
"""
from __future__ import annotations

import os
from typing import Mapping

from tfdist.environments.base import ClusterEnvironment
from tfdist.environments.horovodrun import HorovodRunEnvironment
from tfdist.environments.local import LocalEnvironment
from tfdist.environments.slurm import SlurmEnvironment
from tfdist.environments.tf_config import TFConfigEnvironment

DETECTION_ORDER: tuple[type[ClusterEnvironment], ...] = (
    HorovodRunEnvironment,
    TFConfigEnvironment,
    SlurmEnvironment,
    LocalEnvironment,
)


def detect_environment(environ: Mapping[str, str] | None = None) -> ClusterEnvironment:
    """The first environment of ``DETECTION_ORDER`` whose ``detect`` accepts ``environ``."""
    environ = os.environ if environ is None else environ
    for environment_type in DETECTION_ORDER:
        environment = environment_type(environ)
        if environment.applies():
            return environment
    raise AssertionError("LocalEnvironment.detect always accepts")  # pragma: no cover


__all__ = [
    "ClusterEnvironment",
    "DETECTION_ORDER",
    "HorovodRunEnvironment",
    "LocalEnvironment",
    "SlurmEnvironment",
    "TFConfigEnvironment",
    "detect_environment",
]
