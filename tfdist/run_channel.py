"""The files through which an adaptive run's tasks and its launcher talk, in one folder both can see.

``tfdist launch --backend auto`` (unless ``--no-adapt``) makes a run folder and names it to every task
in ``TFDIST_ADAPT``. The folder is the one source of truth for where the run stands:

* ``epoch-<E>.json``: the chief's report at the end of epoch ``E`` (0-based, counted across plans): the
  variant it ran, the epochs the fit trains, the epoch's seconds and examples/s, each worker's compute
  and communication time (where the backend splits them), the model's parameter count, and whether the
  run can be resumed on another plan (``resumable``; ``resume_problem`` says why not);
* ``verdict-<E>.json``: the launcher's answer, which the chief waits for (the other ranks follow the
  chief's decision, never the file): ``{"action": "continue"}`` or ``{"action": "switch", "to": <variant>}``;
* ``state/``: the checkpoint the chief writes when told to switch (model and optimizer, slots
  included, as ``tf.train.Checkpoint`` writes them), and ``state.json`` naming it with the epochs done;
  the next plan's ``strategy.fit`` restores it and resumes at the next epoch;
* ``resumed-<E>.json``: written by the chief of the next plan once it restored the state (the launcher
  times the switch up to it).

Each file is written whole or not at all (:mod:`tfdist.atomic_write`). The tasks and the launcher must
see the same folder: on one machine, or a filesystem every host mounts at the same path (as for a
multi-host checkpoint). Pure Python; imports only ground modules.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from tfdist.atomic_write import write_atomically

#: The backends a run can switch between: their tasks can be stopped at an epoch and resumed from a checkpoint.
ADAPTIVE_BACKENDS = ("horovod", "parameter_server", "multi_worker_mirrored")
#: The variable that names the run folder to every task; unset, a run does not adapt.
ADAPT_ENV = "TFDIST_ADAPT"
#: Seconds the chief waits for the launcher's verdict on an epoch before the run trains on without adapting.
VERDICT_TIMEOUT_S = 120.0
#: Seconds between two looks at a file that is not there yet.
POLL_S = 0.05
CONTINUE = "continue"
SWITCH = "switch"
#: What ``state.json`` says when the chief could not write the checkpoint: the run trains on.
FAILED = "failed"

__all__ = ["ADAPTIVE_BACKENDS", "ADAPT_ENV", "CONTINUE", "FAILED", "SWITCH", "VERDICT_TIMEOUT_S", "epoch_report_path", "folder_from_env", "left_path",
           "read_json", "resumed_path", "state_dir", "state_path", "verdict_path", "wait_for", "write_json"]


def folder_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The run folder ``TFDIST_ADAPT`` names, or None when the run does not adapt (unset or empty)."""
    value = (os.environ if environ is None else environ).get(ADAPT_ENV, "").strip()
    return value or None


def epoch_report_path(folder: str, epoch: int) -> str:
    return os.path.join(folder, f"epoch-{epoch}.json")


def verdict_path(folder: str, epoch: int) -> str:
    return os.path.join(folder, f"verdict-{epoch}.json")


def resumed_path(folder: str, epoch: int) -> str:
    """Written by the chief that resumed at ``epoch`` (the first epoch of its plan)."""
    return os.path.join(folder, f"resumed-{epoch}.json")


def left_path(folder: str, epoch: int) -> str:
    """Written by the chief that stopped for a switch after ``epoch`` epochs, as its last act (the
    callbacks of ``fit`` ended, files closed; ``fit`` itself may still be freeing its data iterator):
    the launcher may end the rest of that job at once."""
    return os.path.join(folder, f"left-{epoch}.json")


def state_dir(folder: str) -> str:
    return os.path.join(folder, "state")


def state_path(folder: str) -> str:
    return os.path.join(folder, "state.json")


def write_json(path: str, payload: Mapping[str, Any]) -> None:
    """``payload`` as JSON at ``path``, whole or not at all; ``OSError``/``ValueError`` go to the caller."""
    write_atomically(path, json.dumps(dict(payload), allow_nan=False))


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object at ``path``, or None when it is missing, unreadable or not an object."""
    try:
        with open(path) as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def wait_for(path: str, timeout: float = VERDICT_TIMEOUT_S, accept: Callable[[dict[str, Any]], bool] | None = None,
             poll: float = POLL_S, clock: Any = time.monotonic, sleep: Any = time.sleep) -> dict[str, Any] | None:
    """The JSON object at ``path`` once it exists (and ``accept`` takes it), or None after ``timeout``
    seconds."""
    deadline = clock() + timeout
    while True:
        found = read_json(path)
        if found is not None and (accept is None or accept(found)):
            return found
        if clock() >= deadline:
            return None
        sleep(poll)
