"""Backups you can trust: Keras' BackupAndRestore with a verified previous copy to fall back on.

tf-keras' ``BackupAndRestore`` keeps one checkpoint in ``<backup_dir>/chief``. If that file is
truncated (a full disk, a node lost mid-write), every relaunch fails in the restore with
``IndexError: Read less bytes than requested`` and the user must delete the backup and its progress.
``SafeBackup`` wraps it (``strategy.fit`` does this for every ``BackupAndRestore`` it is given):

* after each backup the chief reads the new checkpoint back in full; only a readable one is copied to
  ``<backup_dir>/chief.previous`` (written beside it, then renamed over the old copy in one step);
* a save that fails (full disk, file-size limit) raises one ``BackupError`` line saying whether an
  earlier backup is kept (or that none exists yet); the half-written checkpoint (TensorFlow's
  ``ckpt-N_temp`` directory) is removed and the previous copy is untouched;
* before restoring, the chief reads the newest checkpoint; if it is unreadable and the previous copy
  is good, the previous copy replaces it, with a warning naming the epoch training resumes after;
  with no good copy, a ``BackupError`` names the directory and the fix. Under Horovod every rank
  waits for the chief's check before it restores.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from typing import Any

import tensorflow as tf
import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import upstream
from tfdist.callbacks import _runtime
from tfdist.errors import TfdistError, with_fix

log = logging.getLogger("tfdist")
PREVIOUS = "chief.previous"


class BackupError(TfdistError, OSError):
    """A training backup cannot be written or read; the message says what was kept."""


def unreadable_reason(checkpoint_dir: str) -> str | None:
    """Why the newest checkpoint in ``checkpoint_dir`` cannot be read in full, or ``None``."""
    try:
        prefix = tf.train.latest_checkpoint(checkpoint_dir)
        if prefix is None:
            return "it holds no checkpoint"
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as exc:  # noqa: BLE001  (TensorFlow raises IndexError, OpError, ValueError, ...)
        return f"{type(exc).__name__}: {error_reason(exc)}"
    return None


def error_reason(exc: BaseException) -> str:
    """The operating system's words from a TensorFlow save error ("...; File too large [Op:SaveV2]"),
    else the first line of the error, shortened."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    found = re.search(r";\s*([^;\[\]{}]+?)\s*(\[Op:\w+\])?$", text)
    return found.group(1) if found else text[:200]


def _replace_directory(source: str, target: str) -> None:
    """Copy ``source`` to ``target`` so that ``target`` is always either the old or the new copy."""
    staging = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
    shutil.copytree(source, staging)
    retired = f"{target}.old-{uuid.uuid4().hex[:8]}"
    if os.path.exists(target):
        os.rename(target, retired)
    os.rename(staging, target)
    shutil.rmtree(retired, ignore_errors=True)


def remove_partial_saves(checkpoint_dir: str) -> list[str]:
    """Remove what a failed save left in ``checkpoint_dir``: TensorFlow writes a checkpoint's shards
    into ``<prefix>_temp/`` and renames them into place only when every shard is written. The
    removed paths."""
    removed = []
    try:
        names = os.listdir(checkpoint_dir)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(checkpoint_dir, name)
        if name.endswith("_temp") and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def has_backup(backup_dir: str) -> bool:
    """Whether ``backup_dir`` holds a backup to resume from (the newest or the verified previous copy)."""
    return any(tf.train.latest_checkpoint(os.path.join(backup_dir, name)) is not None
               for name in ("chief", PREVIOUS))


def keep_previous(backup_dir: str) -> str | None:
    """After a backup: copy the newest checkpoint to ``chief.previous`` if it reads back in full.
    Returns why it was not kept (it is unreadable), or ``None``."""
    newest = os.path.join(backup_dir, "chief")
    reason = unreadable_reason(newest)
    if reason is None:
        _replace_directory(newest, os.path.join(backup_dir, PREVIOUS))
    return reason


def recover(backup_dir: str) -> None:
    """Before a restore: make ``<backup_dir>/chief`` readable, from ``chief.previous`` if need be."""
    newest = os.path.join(backup_dir, "chief")
    if tf.train.latest_checkpoint(newest) is None:
        return  # nothing to resume from: a first run
    reason = unreadable_reason(newest)
    if reason is None:
        return
    previous = os.path.join(backup_dir, PREVIOUS)
    if os.path.isdir(previous) and unreadable_reason(previous) is None:
        _replace_directory(previous, newest)
        log.warning("tfdist: the newest backup in %s is unreadable (%s); resuming from %s, the last backup "
                    "that read back in full", newest, reason, previous)
        return
    raise BackupError(with_fix(
        f"the backup in {newest} is unreadable ({reason}) and there is no readable previous copy",
        f"delete {backup_dir} to start training over (its progress is lost)"))


class SafeBackup(tf_keras.callbacks.Callback):
    """Wrap a ``BackupAndRestore`` (or a ChiefOnly around one): verified previous copy, clean
    failures, fallback on restore (see the module docstring). ``is_chief`` says who writes."""

    def __init__(self, callback: Any, is_chief: bool) -> None:
        super().__init__()
        self.callback = callback
        self.backup = getattr(callback, "callback", callback)  # the BackupAndRestore a ChiefOnly wraps
        self.backup_dir = os.fspath(self.backup.backup_dir)
        self.is_chief = is_chief

    def set_model(self, model) -> None:
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params) -> None:
        super().set_params(params)
        self.callback.set_params(params)

    def __getattribute__(self, name: str):
        # Every hook this class does not define (batch hooks, ...) and the batch-hook checks Keras
        # makes are the wrapped callback's.
        if (name.startswith("on_") or name in upstream.BATCH_HOOK_CHECKS) and name not in vars(SafeBackup):
            return getattr(object.__getattribute__(self, "callback"), name)
        return object.__getattribute__(self, name)

    def on_train_end(self, logs=None) -> None:
        self.callback.on_train_end(logs)
        if self.is_chief and self.backup.delete_checkpoint:  # finished: nothing to resume
            shutil.rmtree(os.path.join(self.backup_dir, PREVIOUS), ignore_errors=True)

    def on_train_begin(self, logs=None) -> None:
        if self.is_chief:
            recover(self.backup_dir)
        hvd = _runtime.horovod()
        if hvd is not None and hvd.size() > 1:  # no rank restores before the chief has checked
            hvd.allreduce(tf.constant(0.0), name="tfdist.backup.checked")
        self.callback.on_train_begin(logs)

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self.callback.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None) -> None:
        try:
            self.callback.on_epoch_end(epoch, logs)
        except (OSError, tf.errors.OpError) as exc:
            if self.is_chief:  # only the chief writes <backup_dir>/chief
                remove_partial_saves(os.path.join(self.backup_dir, "chief"))
            if has_backup(self.backup_dir):
                kept, then = "the previous backup is kept", "training resumes from the previous backup"
            else:
                kept, then = "no earlier backup exists", "training starts again from the first epoch"
            raise BackupError(with_fix(
                f"writing the backup of epoch {epoch + 1} to {self.backup_dir} failed ({error_reason(exc)}); "
                f"{kept}",
                f"free disk space (or raise the file-size limit) and relaunch: {then}")) from None
        if self.is_chief:
            reason = keep_previous(self.backup_dir)
            if reason is not None:
                log.error("tfdist: the backup of epoch %d reads back unreadable (%s); keeping the previous "
                          "copy in %s", epoch + 1, reason, os.path.join(self.backup_dir, PREVIOUS))
