"""What a host has installed that a backend needs to launch, read without importing TensorFlow or Horovod.

* :func:`horovod_with_tensorflow`: Horovod's TensorFlow extension (``horovod/tensorflow/mpi_lib*.so``)
  is installed for this interpreter. Found on disk: ``import horovod`` imports its runner, and
  ``horovod.tensorflow`` imports TensorFlow, seconds a probe agent does not spend.
* :class:`HorovodInstall`: that answer from every worker host (the probe's) and the launcher's own
  ``horovodrun``, as one verdict: ``refusal()`` says why a Horovod plan cannot launch, or None.

``tfdist launch --backend auto`` plans only what can launch (:func:`tfdist.auto.pipeline.decide`): on
a cluster without Horovod it weighs parameter servers and MultiWorkerMirrored, and its advice says why.

    HorovodInstall(launcher=True, hosts_without=("h2",)).refusal()
    # "Horovod with its TensorFlow ops is not installed on h2; fix: build Horovod with TensorFlow ..."
"""
from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist.errors import with_fix
from tfdist.launch.horovod_launcher import EXTENSION_LIBRARIES

#: How to install what a Horovod plan needs (scripts/setup.sh builds it so for this repository's venv).
HOROVOD_FIX = ("build Horovod with TensorFlow and Gloo for the same Python on every host "
               "(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 pip install horovod; `make setup` does it here)")


def horovod_with_tensorflow(pythonpath: Sequence[str] = (),
                            find_spec: Callable[[str], Any] | None = None) -> bool:
    """Whether Horovod's TensorFlow extension is installed for this interpreter with ``pythonpath``
    before its own path (the launcher's ``PYTHONPATH``, which every task gets): a file beside
    ``horovod/tensorflow/__init__.py`` named ``mpi_lib`` with an extension suffix. The ``horovod``
    package is located, not imported."""
    if find_spec is None:
        def find_spec(name: str) -> Any:
            return importlib.machinery.PathFinder.find_spec(name, [*pythonpath, *sys.path])
    try:
        spec = find_spec("horovod")
    except (ImportError, ValueError):
        return False
    locations = list(getattr(spec, "submodule_search_locations", None) or []) if spec is not None else []
    library = dict(EXTENSION_LIBRARIES)["tensorflow"]
    return any((Path(location) / "tensorflow" / f"{library}{suffix}").is_file()
               for location in locations for suffix in importlib.machinery.EXTENSION_SUFFIXES)


@dataclass(frozen=True)
class HorovodInstall:
    """Whether a Horovod plan can launch: ``launcher``, horovodrun where ``tfdist launch`` runs
    (:func:`tfdist.launch.commands.horovod_launcher`); ``hosts_without``, the worker hosts whose probe
    agent found no Horovod TensorFlow extension (:func:`horovod_with_tensorflow`)."""

    launcher: bool
    hosts_without: tuple[str, ...] = ()

    @classmethod
    def of(cls, launcher: bool, answers: Sequence[tuple[str, bool | None]]) -> HorovodInstall:
        """From ``(host, found)`` per worker host; ``None`` (an agent that did not say) counts as found."""
        return cls(launcher, tuple(host for host, found in answers if found is False))

    def refusal(self) -> str | None:
        """Why a Horovod plan cannot launch on these hosts, with the fix; None when it can."""
        if not self.launcher:
            return with_fix("horovodrun is neither beside this Python nor on PATH", HOROVOD_FIX)
        if self.hosts_without:
            return with_fix(f"Horovod with its TensorFlow ops is not installed on {', '.join(self.hosts_without)}",
                            HOROVOD_FIX)
        return None


__all__ = ["HOROVOD_FIX", "HorovodInstall", "horovod_with_tensorflow"]
