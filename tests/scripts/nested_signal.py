"""``python nested_signal.py HANDLER WHERE``: a SIGTERM handler that sets a stop, with a signal landing where
a lock-taking handler deadlocks the main thread on its own lock. Prints ``armed`` first, then ``set`` if the
stop was set; a handler that deadlocks never prints it and never exits.

WHERE:
* ``in-handler``: SIGTERM, and a second SIGTERM inside the first handler while its ``Event.set`` holds the
  Event's lock (raised from ``Condition.notify_all``): where a parent-death signal sent more than once
  caught Horovod's launcher;
* ``in-wait``: the main thread waits on the stop, and the first SIGTERM lands inside that wait (raised
  from the first ``Condition.wait`` or ``time.sleep`` it blocks in; an ``Event.wait`` holds the Event's
  lock around its ``Condition.wait``).

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
import time


def raise_sigterm_on_first_call(owner: object, name: str) -> None:
    """The next call of ``owner.name`` raises SIGTERM first: Python runs the handler there, before the
    call goes on."""
    original = getattr(owner, name)

    def first(*args: object, **kwargs: object) -> object:
        setattr(owner, name, original)
        signal.raise_signal(signal.SIGTERM)
        return original(*args, **kwargs)

    setattr(owner, name, first)


def main(handler: str, where: str) -> None:
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
        if where == "in-handler":
            raise_sigterm_on_first_call(threading.Condition, "notify_all")
            signal.raise_signal(signal.SIGTERM)
        elif where == "in-wait":
            raise_sigterm_on_first_call(threading.Condition, "wait")
            raise_sigterm_on_first_call(time, "sleep")
            event.wait(5)
        else:
            sys.exit(f"unknown place {where!r}")
        print("set" if event.is_set() else "not set", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
