"""Why horovodrun failed, in a few words, from the last lines of its stderr. Pure.

horovodrun reports a failure as its own Python traceback: a rank that exits non-zero ends in
``RuntimeError: Horovod detected that one or more processes exited with non-zero status ...``
followed by ``Process name: 1`` and ``Exit code: 2``; a bad ``--network-interface`` ends in
``ValueError: No interface is found for address 127.0.0.1.``. The launcher passes that output
through unchanged and then prints one summary line built here::

    tfdist launch: horovodrun exited with code 1: rank 1 exited with code 2; its output is above

>>> explain_failure(["Traceback (most recent call last):", "RuntimeError: Horovod detected ...",
...                  "Process name: 1", "Exit code: 2"])
'rank 1 exited with code 2'
>>> explain_failure(["Traceback (most recent call last):", "ValueError: No interface is found."])
'ValueError: No interface is found.'
"""
from __future__ import annotations

import re
from typing import Sequence

MAX_SUMMARY = 240  # characters of an exception's message kept in the summary
_PROCESS = re.compile(r"^\s*Process name:\s*(\S+)\s*$")
_EXIT = re.compile(r"^\s*Exit code:\s*(-?\d+)\s*$")
_RANK_LINE = re.compile(r"^\[(\d+)\]<stderr>:(.*)$")
# the last line of a Python traceback: ``ValueError: ...``, ``horovod.x.HorovodInternalError: ...``
_EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)\w*)"
                        r"(?::\s*(.*))?$")
_HOROVOD_RANK_FAILED = "Horovod detected that one or more processes exited"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SUMMARY else text[:MAX_SUMMARY - 3] + "..."


def _exception(line: str) -> str | None:
    match = _EXCEPTION.match(line.strip())
    if match is None:
        return None
    name, message = match.group(1), match.group(2)
    return _short(f"{name}: {message}" if message else name)


def explain_failure(lines: Sequence[str]) -> str | None:
    """A few words on why horovodrun failed (``rank 1 exited with code 2``, or the last exception
    line of its traceback), or ``None`` when its output says nothing recognisable."""
    rank = code = None
    for index, line in enumerate(lines):
        found = _PROCESS.match(line)
        if found and index + 1 < len(lines):
            exited = _EXIT.match(lines[index + 1])
            if exited:
                rank, code = found.group(1), exited.group(1)
    if rank is not None:
        why = f"rank {rank} exited with code {code}"
        own = [_exception(match.group(2)) for line in lines
               if (match := _RANK_LINE.match(line)) and match.group(1) == rank]
        own = [text for text in own if text]
        return f"{why} ({own[-1]})" if own else why
    for line in reversed(lines):
        if _RANK_LINE.match(line):
            continue  # a rank's own lines: horovodrun's verdict comes after them
        text = _exception(line)
        if text is not None and _HOROVOD_RANK_FAILED not in text:
            return text
    return None
