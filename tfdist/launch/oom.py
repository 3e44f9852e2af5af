"""Did a task run out of memory? Its memory cgroup's OOM-kill counter, read before and after it ran.

A task the kernel's OOM killer ends dies by SIGKILL, like one killed by hand; what tells them apart
is the kernel's record in the task's memory cgroup: cgroup v2 ``memory.events.local`` (``oom_kill N``),
v1 ``memory.oom_control`` (``oom_kill N``, Linux 4.13+; older kernels only have ``memory.failcnt``,
the times the limit was hit). The kernel counts a kill in the victim's cgroup whether the cgroup's
own limit or the whole machine ran out, so a counter that rose while the task ran, plus the task's
SIGKILL, is the signal. A task that is a shell (``tfdist launch -- bash run.sh``) does not die by the
SIGKILL of its child: it exits with code 137 (128 + SIGKILL), so that exit is checked the same way
(:attr:`KillCause.exited`). Who reads it: the supervisor on the task's host
(``tfdist.launch.remote_task``), which passes the finding back in one marker line on its stderr
(:func:`encode_exit`), and the launcher itself for tasks it starts on this machine::

    before = snapshot()                      # this process's memory cgroup (tasks inherit it)
    ...                                      # the task runs and dies by SIGKILL
    cause = kill_cause(before, snapshot(), host=None)
    cause.describe("ps:0")                   # 'ps:0 ran out of memory: the kernel's OOM killer ...'

The cgroup is read by :mod:`tfdist.cgroup_memory` (:func:`snapshot`); everything here is pure.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tfdist.cgroup_memory import MemoryRecord, snapshot

__all__ = ["EXIT_MARKER", "SHELL_KILLED", "KillCause", "MemoryRecord", "decode_exit", "encode_exit", "format_bytes",
           "kill_cause", "snapshot"]

#: What the supervisor writes on stderr (one line) when its task died by a signal (or exited with
#: code 137); the launcher consumes it and does not show it.
EXIT_MARKER = "tfdist-task-exit "
#: The exit code of a shell whose command died by SIGKILL (128 + 9): checked like a SIGKILL.
SHELL_KILLED = 128 + 9


@dataclass(frozen=True)
class KillCause:
    """What is known of why a task died by SIGKILL.

    ``oom``: True, the OOM killer killed a process of its memory cgroup while it ran; None, no
    counter could be read (then the OOM killer is only the usual suspect); ``limit``: the cgroup's
    memory limit in bytes, when there is one; ``host``: where it ran (None: this machine);
    ``exited``: the task was not killed itself but exited with code 137, as a shell does whose
    command was killed by SIGKILL.
    """

    oom: bool | None
    host: str | None = None
    limit: int | None = None
    exited: bool = False

    def where(self) -> str:
        return "this machine" if self.host is None else self.host

    def describe(self, name: str) -> str:
        """The first part of the exit line (the policy adds what happens next, then :meth:`fix`)."""
        on = f"{name} on {self.where()}"
        usual = f"the kernel's OOM killer is the usual cause: check `dmesg` on {self.where()}"
        if self.oom:
            cap = f" at its memory limit of {format_bytes(self.limit)}" if self.limit else ""
            if self.exited:
                return (f"{on} ran out of memory: the kernel's OOM killer killed a process it started "
                        f"(SIGKILL){cap}, so it exited with code {SHELL_KILLED}")
            return f"{on} ran out of memory: the kernel's OOM killer killed it (SIGKILL){cap}"
        if self.exited:
            return (f"{name} exited with code {SHELL_KILLED}, the code of a command whose process was killed "
                    f"by SIGKILL ({usual})")
        return f"{name} killed by SIGKILL ({usual})"

    def fix(self, name: str) -> str | None:
        """The fix for an out-of-memory task (None when the cause is not known to be memory)."""
        if not self.oom:
            return None
        more = f"give {self.where()} more memory"
        if name.startswith("ps:"):
            advise = f" --ps-memory {self.limit}" if self.limit else " --ps-memory BYTES"
            return ("split the variables over more ps tasks: raise --ps and pass shards=N to "
                    f"make_strategy('parameter_server', ...) (`tfdist advise{advise} --optimizer NAME` with the "
                    "model's --params and --batch-size, or --probe, gives the minimum), "
                    f"or {more}")
        return f"{more}, run fewer tasks there, or lower the batch size"


def kill_cause(before: MemoryRecord | None, after: MemoryRecord | None, host: str | None = None,
               exited: bool = False) -> KillCause:
    """The cause of a SIGKILL (``exited``: of an exit with code 137) from two readings of the task's
    memory cgroup (None: unreadable)."""
    if before is None or after is None or before.cgroup != after.cgroup:
        return KillCause(None, host, exited=exited)
    if before.kills is not None and after.kills is not None:
        return KillCause(after.kills > before.kills, host, after.limit, exited)
    if before.failcnt is not None and after.failcnt is not None:  # old v1 kernels: the limit was hit
        return KillCause(after.failcnt > before.failcnt, host, after.limit, exited)
    return KillCause(None, host, after.limit, exited)


def format_bytes(count: int | None) -> str:
    """``1.5 GiB``, ``768 MiB`` (with the exact bytes, which ``--ps-memory`` takes)."""
    if count is None:
        return "no limit"
    if count >= 1 << 30:
        return f"{count / (1 << 30):.2f} GiB ({count} bytes)"
    return f"{count / (1 << 20):.0f} MiB ({count} bytes)"


def encode_exit(signal_number: int, cause: KillCause) -> str:
    """The supervisor's marker line for a task that died by ``signal_number`` (no newline); with
    ``cause.exited``, for a task that exited with code 128 + ``signal_number``."""
    body: dict[str, Any] = {"signal": signal_number, "oom": cause.oom, "limit": cause.limit}
    if cause.exited:
        body["exited"] = True
    return EXIT_MARKER + json.dumps(body, separators=(",", ":"))


def decode_exit(line: str, host: str | None) -> tuple[int, KillCause] | None:
    """``(signal, cause)`` from a marker line (the task ran on ``host``), or None if it is not one."""
    if not line.startswith(EXIT_MARKER):
        return None
    try:
        body = json.loads(line[len(EXIT_MARKER):])
        signal_number = int(body["signal"])
        oom, limit, exited = body.get("oom"), body.get("limit"), body.get("exited", False)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if (oom not in (True, False, None) or not (limit is None or isinstance(limit, int))
            or not isinstance(exited, bool)):
        return None
    return signal_number, KillCause(oom, host, limit, exited)
