"""The life of a process that serves a parameter-server job: kept apart from the strategy's training.

* ``serve_until_chief_leaves``: a ps or worker task starts its gRPC server, waits for the chief to
  come and go, then ends the process (TensorFlow 2 has no clean server shutdown, hence an exit).
* ``exit_when_chief_leaves``: the evaluator's watch, in a background thread.
* ``wait_for_tasks``: the chief's start-up check that every task of the cluster answers.
* ``silent_tasks``: after a gRPC failure, which tasks are gone.

The contract between chief and servers (docs/parameter-servers.md, "When a task dies"): a server waits up to
``startup_timeout`` for the chief to appear, and ``grace`` after it disappeared for a restarted
chief to come back, then exits 0 (the chief came and went) or 1 (it never came). A chief checks
that every server answers within its own start-up timeout and fails naming the missing ones.

Every function takes its clock, sleep, probe and exit as arguments, so tests drive them without
sockets, waiting or ending the test process.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from typing import Callable, Mapping

from tfdist.tf_noise import quiet_server_logs

log = logging.getLogger("tfdist")

Probe = Callable[[str], bool]
Exit = Callable[[int], object]


def reachable(address: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``HOST:PORT`` (``[v6]:PORT`` too)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def wait_for_chief_to_finish(chief_address: str, grace: float, startup_timeout: float, *,
                             poll: float = 1.0, probe: Probe = reachable,
                             clock: Callable[[], float] = time.monotonic,
                             sleep: Callable[[float], object] = time.sleep) -> bool:
    """Block until the chief has come and then stayed away for ``grace`` seconds.

    ``False`` when it never came within ``startup_timeout``.
    """
    deadline = clock() + startup_timeout
    while not probe(chief_address):
        if clock() > deadline:
            return False
        sleep(poll)
    gone_since: float | None = None
    while True:
        sleep(poll)
        if probe(chief_address):
            gone_since = None
        elif gone_since is None:
            gone_since = clock()
        elif clock() - gone_since >= grace:
            return True


def wait_for_tasks(addresses: Mapping[str, str], timeout: float, *, poll: float = 0.5,
                   probe: Probe = reachable, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], object] = time.sleep) -> list[str]:
    """Wait until every task (``{"worker:0": "host:port", ...}``) answers; return the names of
    those still silent after ``timeout`` seconds (empty when all answered)."""
    deadline = clock() + timeout
    missing = dict(addresses)
    while True:
        missing = {name: address for name, address in missing.items() if not probe(address)}
        if not missing or clock() >= deadline:
            return sorted(missing)
        sleep(poll)


#: how long a gRPC failure's tasks are probed again while every one of them still answers
SETTLE_SECONDS = 5.0
#: how long, once one task is silent, the others are probed again for tasks that died with it
COMPANION_SECONDS = 2.0


def silent_tasks(addresses: Mapping[str, str], *, settle: float | None = None, companion: float | None = None,
                 poll: float = 0.25, probe: Probe = reachable, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> list[str]:
    """The tasks (``{"ps:0": "host:port", ...}``) that do not answer, by name: after a gRPC failure,
    the ones that are really gone, whatever task TensorFlow's error text mentions first.

    A process killed a moment ago keeps its listening socket until the kernel has torn it down, which on
    a loaded machine outlasts the gRPC error by a second or more, and the kernel completes connections
    to that socket meanwhile. So while every task answers they are probed again for up to ``settle``
    seconds (``None``: :data:`SETTLE_SECONDS`, read at the call); and once one is silent, the others
    are probed again for ``companion`` seconds (``None``: :data:`COMPANION_SECONDS`): the tasks of a
    host that went down die together, and their sockets close one after the other. Empty if all still
    answer after ``settle`` seconds."""
    silent: set[str] = set()

    def probe_the_rest() -> None:
        silent.update(name for name, address in addresses.items() if name not in silent and not probe(address))

    deadline = clock() + (SETTLE_SECONDS if settle is None else settle)
    probe_the_rest()
    while not silent and clock() < deadline:
        sleep(poll)
        probe_the_rest()
    if silent:
        deadline = clock() + (COMPANION_SECONDS if companion is None else companion)
        while len(silent) < len(addresses) and clock() < deadline:
            sleep(poll)
            probe_the_rest()
    return sorted(silent)


def _flush() -> None:
    sys.stdout.flush()
    sys.stderr.flush()


def serve_until_chief_leaves(name: str, start_server: Callable[[], object], chief_address: str,
                             grace: float, startup_timeout: float, *, exit: Exit = os._exit,
                             wait: Callable[..., bool] | None = None,
                             quiet: Callable[[], object] = quiet_server_logs) -> None:
    """Start this task's server, wait for the chief to come and go, then ``exit`` (0, or 1 when
    the chief never came). With the default ``os._exit`` this never returns. ``quiet`` first leaves
    TensorFlow's C++ INFO lines out of this process, which runs no user code from here on
    (:func:`tfdist.tf_noise.quiet_server_logs`: not when the user set ``TF_CPP_MIN_LOG_LEVEL``)."""
    quiet()
    start_server()
    print(f"[tfdist] {name} serving; waiting for the chief at {chief_address}", file=sys.stderr, flush=True)
    finished = (wait or wait_for_chief_to_finish)(chief_address, grace, startup_timeout)
    if not finished:
        log.error("%s: the chief at %s did not start within %.0fs; exiting", name, chief_address,
                  startup_timeout)
    _flush()
    exit(0 if finished else 1)


def exit_when_chief_leaves(chief_address: str, grace: float, startup_timeout: float, *,
                           exit: Exit = os._exit,
                           wait: Callable[..., bool] | None = None) -> threading.Thread:
    """The evaluator's watch: a daemon thread that ends the process once the chief has gone."""
    def watch() -> None:
        finished = (wait or wait_for_chief_to_finish)(chief_address, grace, startup_timeout)
        if finished:
            log.warning("evaluator: the chief has finished; exiting")
        else:
            log.error("evaluator: the chief at %s did not start within %.0fs; exiting", chief_address,
                      startup_timeout)
        _flush()
        exit(0 if finished else 1)

    thread = threading.Thread(target=watch, name="tfdist-chief-watch", daemon=True)
    thread.start()
    return thread
