"""Every place a training run will write, checked before the first step instead of after an epoch.

``output_paths`` finds the directories the callbacks of a ``fit`` write to (checkpoints, backups,
TensorBoard logs, CSV logs, tfdist's own ``checkpoint_dir``); ``check_writable`` creates each one
if needed and writes and removes a probe file there (``tfdist.atomic_write.new_file_problem``), so a
read-only disk, a path under a regular file or a missing permission fails at once with one line
naming the path and the fix.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from tfdist.atomic_write import new_file_problem
from tfdist.errors import TfdistError, with_fix
from tfdist.keras_compat import is_keras


class OutputPathError(TfdistError, OSError):
    """A directory a run writes to cannot be created or written."""


def output_paths(callbacks: Iterable[Any]) -> list[tuple[str, str]]:
    """``(what, directory)`` for every callback that writes files; wrappers (ChiefOnly) unwrapped."""
    found: list[tuple[str, str]] = []
    for callback in callbacks:
        inner = getattr(callback, "callback", callback)  # ChiefOnly and TensorBoardRun wrap a writer
        name = type(inner).__name__
        if is_keras(inner, "callbacks.BackupAndRestore"):
            found.append((f"{name}(backup_dir=...)", inner.backup_dir))
        elif is_keras(inner, "callbacks.TensorBoard"):
            found.append((f"{name}(log_dir=...)", inner.log_dir))
        elif is_keras(inner, "callbacks.ModelCheckpoint"):
            found.append((f"{name}(filepath=...)", _fixed_directory(os.fspath(inner.filepath))))
        elif is_keras(inner, "callbacks.CSVLogger"):
            found.append((f"{name}(filename=...)", os.path.dirname(os.fspath(inner.filename)) or "."))
    return found


def _fixed_directory(template: str) -> str:
    """The longest directory of a Keras file template before its first placeholder:
    ``ckpt/{epoch:02d}/w.h5`` -> ``ckpt`` (the check must not create ``{epoch:02d}`` literally)."""
    before = template.split("{", 1)[0]
    directory = before if before.endswith(os.sep) and "{" in template else os.path.dirname(before)
    return directory.rstrip(os.sep) or "."


def check_writable(paths: Iterable[tuple[str, str]]) -> None:
    """Create each directory and write a probe file in it; ``OutputPathError`` on the first failure."""
    for what, directory in paths:
        directory = os.fspath(directory)
        if "://" in directory:
            continue  # gs://, s3://, hdfs://: TensorFlow's file systems, checked when they are used
        reason = _unwritable_reason(directory)
        if reason is not None:
            raise OutputPathError(with_fix(
                f"{what}: cannot write to {directory!r} ({reason})",
                "pick a directory this process can create and write (on the chief), or fix its "
                "permissions, before training starts"))


def _unwritable_reason(directory: str) -> str | None:
    """Why ``directory`` cannot be created or written, or ``None`` when a probe file was written (the
    probe is ``new_file_problem``'s; creating the directory first is this check's own)."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        return "Not a directory"
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return new_file_problem(directory)
