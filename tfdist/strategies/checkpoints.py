"""The custom loop's checkpoint: model, optimizer and epoch; the chief writes, every process agrees.

    checkpoint = strategy.checkpoint("ckpt")      # after strategy.setup(model, optimizer)
    start = checkpoint.restore()                  # 0, or the epoch after the last one saved
    for epoch in range(start, epochs):
        ...
        checkpoint.save(epoch + 1)

Who writes is the export's rule (``DistributedStrategy._export_role``): the chief writes into
``directory``; under multi_worker_mirrored every other worker saves too (a save may run collectives)
into a throwaway directory that is removed; under Horovod the other ranks write nothing. Every process
hears every process's failure (a full disk, a directory it cannot write), so none waits for the others in
vain. ``restore`` reads the newest checkpoint on every process and returns the epoch the chief found;
Horovod's first-step broadcast (armed again by a restore) then gives every rank the chief's values.
"""
from __future__ import annotations

import os
import shutil
from typing import Any

from tfdist.errors import ArgumentValueError, TfdistError, with_fix
from tfdist.strategies import outputs


class CheckpointError(TfdistError, OSError):
    """A loop checkpoint could not be written or read, on this process or another."""


class LoopCheckpoint:
    """``restore() -> start epoch`` and ``save(epoch)`` of the loop's model and optimizer.

    ``strategy`` is the ``DistributedStrategy`` (its role in a save, its agreement on the epoch);
    ``max_to_keep`` newest checkpoints are kept in ``directory``."""

    def __init__(self, strategy: Any, model: Any, optimizer: Any, directory: Any, max_to_keep: int = 3) -> None:
        import tensorflow as tf

        if not isinstance(max_to_keep, int) or isinstance(max_to_keep, bool) or max_to_keep < 1:
            raise ArgumentValueError(with_fix(f"`max_to_keep` must be an integer >= 1, got {max_to_keep!r}",
                                              "pass e.g. max_to_keep=3"))
        if not isinstance(directory, (str, os.PathLike)):
            raise ArgumentValueError(with_fix(f"`directory` must be a path, got {directory!r}",
                                              "pass e.g. strategy.checkpoint('checkpoints')"))
        self.directory = os.path.abspath(os.fspath(directory))
        self._strategy = strategy
        self._optimizer = optimizer
        self._role = strategy._export_role()
        self._max_to_keep = max_to_keep
        self._epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfdist_loop_epoch")
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=self._epoch)
        self._together(self._check_writable, "cannot write the checkpoint directory")

    def _check_writable(self) -> None:
        if self._role.writes:
            outputs.check_writable([("`directory`", self.directory)])

    def _target(self) -> str | None:
        """Where this process saves: the directory (chief), a throwaway sibling (MWM workers), or nowhere."""
        if self._role.writes:
            return self.directory
        if self._role.throwaway:
            return os.path.join(os.path.dirname(self.directory),
                                f".{os.path.basename(self.directory)}.tfdist-worker-{self._strategy.rank}")
        return None

    def _together(self, action: Any, what: str) -> Any:
        """Run ``action`` here; raise on every process if it failed on any (``Role.agree``)."""
        import tensorflow as tf

        problem, result = None, None
        try:
            result = action()
        except (OSError, tf.errors.OpError, AssertionError) as exc:  # AssertionError: another model's
            problem = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        problem = self._role.agree(problem)
        if problem is not None:
            raise CheckpointError(with_fix(f"{what} {self.directory!r} ({problem})",
                                           "pick a directory the chief can create and write (shared by every "
                                           "worker under multi_worker_mirrored), with free space"))
        return result

    def save(self, epoch: int) -> str | None:
        """Save with ``epoch`` as the epoch to resume at; the path on the chief, ``None`` elsewhere. Call it
        on every process at the same point (it is a collective on horovod and multi_worker_mirrored)."""
        import tensorflow as tf

        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ArgumentValueError(with_fix(f"`epoch` must be an integer >= 0, got {epoch!r}",
                                              "pass the epoch to resume at: checkpoint.save(epoch + 1)"))
        self._epoch.assign(epoch)
        self._strategy._loop_before_save(self._optimizer)
        target = self._target()

        def write() -> str | None:
            if target is None:
                return None
            manager = tf.train.CheckpointManager(self._checkpoint, target, max_to_keep=self._max_to_keep)
            try:
                return manager.save(checkpoint_number=epoch)
            finally:
                if not self._role.writes:
                    shutil.rmtree(target, ignore_errors=True)

        path = self._together(write, "cannot save the checkpoint into")
        return path if self._role.writes else None

    def restore(self) -> int:
        """Restore the newest checkpoint of ``directory`` (if there is one) and return the epoch to start
        at: 0 without one. Every process returns the chief's epoch."""
        import tensorflow as tf

        def read() -> int:
            latest = tf.train.latest_checkpoint(self.directory) if os.path.isdir(self.directory) else None
            if latest is None:
                return 0
            self._checkpoint.restore(latest).assert_existing_objects_matched()
            return int(self._epoch.numpy())

        epoch = self._together(read, "cannot restore the checkpoint from")
        epoch = self._strategy._loop_agree_epoch(epoch)
        self._epoch.assign(epoch)
        self._strategy._loop_restored()
        return epoch
