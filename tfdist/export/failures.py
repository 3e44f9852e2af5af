"""A write of an export that hit a limit of the disk (full, quota, file-size limit), told in one line
(no TensorFlow imported).

TensorFlow reports these as ``OutOfRangeError: <temporary file>; File too large [Op:SaveV2]`` or
``ResourceExhaustedError: ...; No space left on device``; Python's own writes (a ``.keras`` zip) as
``OSError`` with ``ENOSPC``, ``EDQUOT`` or ``EFBIG``. ``limit_error`` turns any of them into an
``ExportError`` that names the destination, what happened, that the previous export was kept, and the
fix; other errors (a ``ResourceExhaustedError`` that is out of memory, say) are left as they are.

    try:
        saved_model.write(model, serving, staging.written, format)
    except Exception as exc:
        raise limit_error(exc, target) or exc
"""
from __future__ import annotations

import errno
import os
import resource

from tfdist.errors import with_fix
from tfdist.export.errors import ExportError

#: errno -> what happened, in words.
LIMITS: dict[int, str] = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
                          errno.EFBIG: "a file reached the file-size limit"}
#: TensorFlow's classes for these errnos (tensorflow/core/platform/errors.cc: ENOSPC, EDQUOT ->
#: RESOURCE_EXHAUSTED; EFBIG -> OUT_OF_RANGE); told apart from their other uses by the errno's text.
_TF_CLASSES = ("OutOfRangeError", "ResourceExhaustedError")


def limit_of(exc: BaseException) -> int | None:
    """The errno (``ENOSPC``, ``EDQUOT``, ``EFBIG``) of a write that hit a disk limit, looking through
    the chain of causes; None for any other error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in LIMITS:
            return current.errno
        if type(current).__name__ in _TF_CLASSES and type(current).__module__.startswith("tensorflow"):
            text = str(current)
            for code in LIMITS:
                if os.strerror(code) in text:
                    return code
        current = current.__cause__ or current.__context__
    return None


def limit_error(exc: BaseException, target: str, scratch: str | None = None) -> ExportError | None:
    """An ``ExportError`` for ``exc`` when it is a write that hit a disk limit while exporting to
    ``target``, else None. Call it while the previous export (if any) is still at ``target``.
    ``scratch``: the directory a task that writes a throwaway copy was writing under."""
    code = limit_of(exc)
    if code is None:
        return None
    parent = scratch or os.path.dirname(target) or "."
    kept = ("the previous export there is kept, unchanged" if os.path.lexists(target)
            else "nothing was written there")
    what = f"this task's throwaway copy (under {scratch!r}) of the export" if scratch else "the export"
    detail = ""
    if code == errno.EFBIG:
        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY:
            detail = f": this process may write files of at most {soft:,} bytes (RLIMIT_FSIZE)"
    problem = f"could not write {what} {target!r}: {LIMITS[code]} ({os.strerror(code)}){detail}; {kept}"
    if code == errno.EFBIG:
        fix = ("raise the file-size limit (`ulimit -f unlimited` in the shell or job script that starts "
               "training, or the job's RLIMIT_FSIZE), or export to a file system that takes larger files; "
               "then export again")
    elif code == errno.EDQUOT:
        fix = f"free space in your disk quota on {parent!r}, or export to another disk; then export again"
    else:
        fix = f"free space on the disk of {parent!r} (`df -h {parent}`), or export to another disk; then export again"
    return ExportError(with_fix(problem, fix))
