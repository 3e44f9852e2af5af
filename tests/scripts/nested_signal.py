"""``python nested_signal.py HANDLER``: SIGTERM, and a second SIGTERM inside the first handler, while that
handler's ``threading.Event.set`` holds the Event's lock (where a parent-death signal sent twice caught
Horovod's launcher). Prints ``armed`` first, then ``set`` if the Event was set; a handler that deadlocks
on its own lock never prints it and never exits.

HANDLER: ``bare`` (a handler that sets an Event), ``once`` (the same through
``tfdist.launch.processes.handler_once``), ``stop_signals`` (``StopSignals``), ``horovod`` (Horovod's
``register_shutdown_event``), ``horovod_guarded`` (the same after
``tfdist.upstream.guard_horovod_shutdown_signals``).
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading


def second_signal_inside_notify() -> None:
    """The next ``Condition.notify_all`` (inside ``Event.set``, the Event's lock held) raises SIGTERM
    first; Python runs its handler there, before ``notify_all`` goes on."""
    notify_all = threading.Condition.notify_all

    def nested(self: threading.Condition) -> None:
        threading.Condition.notify_all = notify_all
        signal.raise_signal(signal.SIGTERM)
        notify_all(self)

    threading.Condition.notify_all = nested


def main(handler: str) -> None:
    from tfdist.launch import processes

    stack = contextlib.ExitStack()
    if handler in ("bare", "once"):
        event = threading.Event()
        body = lambda signum, frame: event.set()  # noqa: E731
        signal.signal(signal.SIGTERM, body if handler == "bare" else processes.handler_once(body))
    elif handler == "stop_signals":
        event = stack.enter_context(processes.StopSignals()).stopped
    elif handler in ("horovod", "horovod_guarded"):
        import horovod.runner.gloo_run as gloo_run

        from tfdist import upstream

        if handler == "horovod_guarded" and upstream.guard_horovod_shutdown_signals(processes.handler_once) is None:
            sys.exit("guard_horovod_shutdown_signals left Horovod untouched")
        event = gloo_run.register_shutdown_event()
    else:
        sys.exit(f"unknown handler {handler!r}")
    with stack:
        print("armed", flush=True)
        second_signal_inside_notify()
        signal.raise_signal(signal.SIGTERM)
        print("set" if event.is_set() else "not set", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
