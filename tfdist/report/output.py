"""Where the report goes: the ``out`` path checked before anything is read, then written atomically.

    suffix = check_out("runs/report.html")      # ".html"; ArgumentValueError naming `out` and the fix
    write_atomic("runs/report.html", page)      # a temporary sibling, then a rename: never a half file

``check_out`` refuses what can be known in advance (a wrong suffix, a folder or FIFO at the path, a
file where a folder should be, a folder nothing can be created in: it creates and removes a temporary
file there); a write that fails later raises :class:`ReportError` with one line.
"""
from __future__ import annotations

import os
import stat

from tfdist.atomic_write import new_file_problem, write_atomically
from tfdist.errors import ArgumentValueError, TfdistError, with_fix

#: The file kinds the report can write, by suffix.
SUFFIXES = (".html", ".png")
_WRITABLE_FIX = "pass a path in a folder you can write to, e.g. runs/report.html"


class ReportError(TfdistError, RuntimeError):
    """The report could not be made (nothing readable, or the output could not be written): exit 1."""


def _target(out: str) -> str:
    """The path really written: a symbolic link's target (the link itself is kept)."""
    return os.path.realpath(out) if os.path.islink(out) else out


def check_out(out: str) -> str:
    """``out``'s suffix (``.html`` or ``.png``) once the path is known to be writable, else an
    ArgumentValueError naming `out`, what is wrong and the fix."""
    suffix = os.path.splitext(out)[1].lower()
    if suffix not in SUFFIXES:
        raise ArgumentValueError(with_fix(
            f"`out` must end in .html or .png, got {out!r}",
            "pass e.g. runs/report.html (a page with the figures embedded) or report.png (one image)"))
    target = _target(out)
    if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
        kind = "a folder" if os.path.isdir(target) else "not a regular file (a FIFO, socket or device)"
        raise ArgumentValueError(with_fix(f"`out` {out!r} is {kind}",
                                          "pass the path of a file to (over)write"))
    parent = os.path.dirname(os.path.abspath(target))
    existing = parent
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ArgumentValueError(with_fix(
            f"`out` {out!r} cannot be written: {existing!r} is a file, not a folder", _WRITABLE_FIX))
    problem = new_file_problem(existing)
    if problem is not None:
        raise ArgumentValueError(with_fix(f"`out` {out!r} cannot be written: nothing can be created in "
                                          f"{existing!r} ({problem})", _WRITABLE_FIX))
    return suffix


def write_atomic(out: str, data: bytes) -> None:
    """Write ``data`` to ``out`` whole or not at all (:func:`tfdist.atomic_write.write_atomically`, into a
    symbolic link's target, its folders made first); :class:`ReportError` (one line) when that fails, and
    then no temporary file is left and ``out`` is as it was."""
    target = _target(out)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        write_atomically(target, data)
    except OSError as exc:
        raise ReportError(with_fix(f"cannot write {out!r}: {exc.strerror or exc}", _WRITABLE_FIX)) from None
