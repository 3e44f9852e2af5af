"""Where an export goes, decided before anything is written, and written atomically.

Pure file-system logic (no TensorFlow), shared by every backend:

* ``check_target`` refuses, before anything is written, an existing path without ``overwrite``, an
  existing path that is not an export (``overwrite`` never deletes anything else), and a parent that
  cannot be created or written, each in one line naming the path and the fix;
* ``atomic_target`` yields a temporary sibling (``.NAME.tfdist-tmp-HOST-PID-RANDOM``) to write into
  and renames it onto the path only once the write has finished, so a crash, a full disk or a kill
  leaves the previous export (or nothing) at the path, never half an export;
* ``sweep`` removes the temporary siblings a killed export left behind (only those of processes of
  this host that are gone) and puts back a previous export a kill caught between the two renames of
  an overwrite.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
import tempfile
from typing import Any, Iterator

from tfdist.atomic_write import new_file_problem
from tfdist.errors import TfdistError, with_fix

#: What each export format writes: a SavedModel directory or a Keras zip file.
FORMATS = ("saved_model", "keras")
_TMP, _OLD = "tfdist-tmp", "tfdist-old"
_SIBLING = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tfdist-tmp|tfdist-old)-(?P<host>[^-]+)-(?P<pid>\d+)-[0-9a-f]+$")


class ExportPathError(TfdistError, OSError):
    """The export path cannot be used: it exists, it is not an export, or it cannot be written."""


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def is_export(path: str, format: str) -> bool:
    """Whether ``path`` holds an export of ``format`` (what ``overwrite=True`` may replace)."""
    if format == "keras":
        return os.path.isfile(path) and path.endswith(".keras")
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "saved_model.pb"))


def absolute_target(path: Any, format: str) -> str:
    """The absolute export path for ``format``, or ``ExportPathError``; reads nothing on disk, so
    every task gets the same answer."""
    if format not in FORMATS:
        raise ExportPathError(with_fix(f"`format` must be one of {list(FORMATS)}, got {format!r}",
                                       "pass format='saved_model' (for serving) or format='keras'"))
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ExportPathError(with_fix(f"`path` must be a non-empty path, got {path!r}",
                                       "pass the directory to export to, e.g. 'exports/model/1'"))
    target = os.path.abspath(os.fspath(path))
    if format == "keras" and not target.endswith(".keras"):
        raise ExportPathError(with_fix(f"`path` {target!r} must end in .keras with format='keras'",
                                       f"pass {os.path.basename(target)}.keras, or format='saved_model'"))
    return target


def check_target(path: Any, format: str, overwrite: bool) -> str:
    """The absolute export path, or ``ExportPathError`` naming it; writes nothing but a probe file in
    the nearest existing directory (removed at once)."""
    target = absolute_target(path, format)
    if os.path.lexists(target):
        if not overwrite:
            raise ExportPathError(with_fix(f"`path` {target!r} already exists",
                                           "pass overwrite=True to replace the export there, or another path"))
        if not is_export(target, format):
            what = ("a SavedModel directory (with saved_model.pb)" if format == "saved_model"
                    else "a .keras file")
            raise ExportPathError(with_fix(
                f"`path` {target!r} exists and is not {what}; overwrite=True replaces an export only",
                "remove it yourself or pick another path"))
    reason = _unwritable(os.path.dirname(target))
    if reason is not None:
        raise ExportPathError(with_fix(f"`path` {target!r}: cannot write its parent directory ({reason})",
                                       "pick a path under a directory this process can create and write"))
    return target


def _unwritable(directory: str) -> str | None:
    """Why ``directory`` (or, if missing, its nearest existing ancestor) cannot be written, else None."""
    probe = directory
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return f"{probe!r} is not a directory"
    return new_file_problem(probe)


def _sibling(target: str, kind: str) -> str:
    parent, name = os.path.split(target)
    return os.path.join(parent, f".{name}.{kind}-{_host()}-{os.getpid()}-{secrets.token_hex(4)}")


def siblings(target: str) -> list[str]:
    """Every temporary or previous-export sibling of ``target`` (any process, any host)."""
    parent, name = os.path.split(target)
    try:
        entries = os.listdir(parent)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(parent, entry) for entry in entries
                  if (match := _SIBLING.match(entry)) and match["name"] == name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def sweep(target: str) -> list[str]:
    """Clean up after exports of ``target`` that were killed; returns what was removed or restored.

    Only siblings of processes of this host that are gone are touched. A previous export moved aside
    by an overwrite that was killed before its new copy took its place is put back."""
    done = []
    for path in siblings(target):
        match = _SIBLING.match(os.path.basename(path))
        if match["host"] != _host() or _alive(int(match["pid"])):
            continue
        if match["kind"] == _OLD and not os.path.lexists(target):
            os.rename(path, target)
        else:
            _remove(path)
        done.append(path)
    return done


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


class Staging:
    """An export being written: ``written`` (inside a temporary sibling of ``target``) is put at
    ``target`` only by :meth:`commit`, after the tasks agreed that every one of them succeeded."""

    def __init__(self, written: str, target: str) -> None:
        self.written = written
        self.target = target

    def commit(self) -> None:
        if not os.path.lexists(self.written):
            raise ExportPathError(with_fix(f"the export wrote nothing to {self.written!r}",
                                           "report this with the model that was exported"))
        commit(self.written, self.target)


@contextlib.contextmanager
def staged_target(target: str) -> Iterator[Staging]:
    """A :class:`Staging` for ``target``; its temporary sibling is removed when the block ends, so
    an export never committed (an error, another task's failure) leaves nothing; a kill leaves the
    sibling only, which the next export of ``target`` removes (``sweep``)."""
    sweep(target)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    temporary = _sibling(target, _TMP)
    os.mkdir(temporary)
    try:
        yield Staging(os.path.join(temporary, os.path.basename(target)), target)
    finally:
        _remove(temporary)


@contextlib.contextmanager
def atomic_target(target: str) -> Iterator[str]:
    """Yield where to write the export: a path named like ``target`` inside a temporary sibling
    directory. Once the block has finished, the export replaces ``target`` (two renames when an
    export is there already); on any error, or a kill, nothing but the sibling is left (``sweep``)."""
    with staged_target(target) as staging:
        yield staging.written
        staging.commit()


def commit(written: str, target: str) -> None:
    """Put the finished export ``written`` at ``target``: a rename, or, over a previous export, a
    rename aside, the rename into place and the removal of the previous one."""
    if not os.path.lexists(target):
        os.rename(written, target)
        return
    previous = _sibling(target, _OLD)
    os.rename(target, previous)
    try:
        os.rename(written, target)
    except OSError:
        os.rename(previous, target)
        raise
    _remove(previous)


@contextlib.contextmanager
def throwaway_target(target: str) -> Iterator[str]:
    """A private temporary directory for a task that must write but whose copy is not kept (the
    workers of MultiWorkerMirroredStrategy); removed afterwards, whatever happens."""
    directory = tempfile.mkdtemp(prefix="tfdist-export-")
    try:
        yield os.path.join(directory, os.path.basename(target))
    finally:
        shutil.rmtree(directory, ignore_errors=True)

