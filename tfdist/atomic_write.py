"""Files written whole or not at all, and the probe that a folder takes a new file: one policy for tfdist.

Every file tfdist writes for a user or for another process (a plan, a report, TF_CONFIG files, a bound
port's record, a Horovod launcher's script, an elastic job's discovery script) goes through
:func:`write_atomically`:

* the data goes to a temporary sibling (``.<name>.<random>.tmp``, so a reader never sees half a file and a
  glob for ``*.json`` never matches it), is flushed and ``fsync``-ed, gets its final mode, and is renamed
  over the target with ``os.replace``; the folder is then ``fsync``-ed (best effort), so the rename
  survives a crash too;
* the mode is the replaced file's, else what ``open`` would give (``0o666`` less the umask); a caller
  that needs another (an executable script, a private file) says so;
* on any failure the temporary file is removed and the target is as it was; the ``OSError`` goes to the
  caller, which names the file and the fix in its own error type.

Ground level: this module imports nothing of tfdist.

    write_atomically("plan.json", text)                    # str is written as UTF-8
    write_atomically("discover.sh", script, mode=0o755)
    problem = new_file_problem("/proc")                     # "Permission denied", or None when it can
"""
from __future__ import annotations

import os
import stat
import tempfile

__all__ = ["default_mode", "new_file_problem", "write_atomically"]


def default_mode(target: str) -> int:
    """The mode a rewritten ``target`` keeps: its own when it exists, else ``0o666`` less the umask."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomically(path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None) -> str:
    """Write ``data`` (``str`` as UTF-8) to ``path`` whole or not at all; the path as a string.

    Raises the ``OSError`` of the step that failed, after removing the temporary file.
    """
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    final_mode = default_mode(target) if mode is None else mode
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, final_mode)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _fsync_folder(folder)
    return target


def new_file_problem(folder: str | os.PathLike[str]) -> str | None:
    """Why ``folder`` takes no new file (``"Permission denied"``, ``"Read-only file system"``, ...), or
    None when it does. Tried for real, as :func:`write_atomically` will: a temporary file is created and
    removed, because ``os.access`` says yes to root on ``/proc`` and on read-only mounts."""
    try:
        handle, probe = tempfile.mkstemp(dir=os.fspath(folder), prefix=".tfdist-probe-", suffix=".tmp")
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(handle)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def _fsync_folder(folder: str) -> None:
    """Make a rename durable; not every file system opens or syncs a folder, so best effort."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
