"""TensorBoard logs that let runs be compared: one directory per run, tagged with its set-up.

    tb = TensorBoardRun("runs", strategy=strategy, batch_size=64)
    strategy.fit(model, x, y, callbacks=[strategy.throughput(64), tb])
    # tensorboard --logdir runs    -> Scalars: one curve per run; HParams: strategy, workers, ...

Only the chief writes. Each run lands in ``<logdir>/<run-name>/`` (``train/`` and
``validation/`` below it, as Keras writes them) and records its hyperparameters (strategy,
workers, per-worker and global batch, plus any you add) with the HParams plugin, so the
HParams tab shows throughput and loss side by side per set-up.
"""
from __future__ import annotations

import functools
import os
import time
from typing import Any, Mapping

import tensorflow as tf

from tfdist import keras_compat
from tfdist.callbacks import _runtime
from tfdist.callbacks.chief_only import ChiefOnly
from tfdist.strategies.state import current_strategy


def default_run_name(kind: str, workers: int, batch_size: int | None) -> str:
    """``horovod-2w-b64-20261130-041500``: set-up first, then a timestamp for uniqueness."""
    batch = f"-b{batch_size}" if batch_size else ""
    return f"{kind}-{workers}w{batch}-{time.strftime('%Y%m%d-%H%M%S')}"


def _write_hparams(log_dir: str, run_name: str, hparams: Mapping[str, Any]) -> None:
    """One HParams record (and a text summary of it) for the run, in ``log_dir``."""
    from tensorboard.plugins.hparams import api as hp

    writer = tf.summary.create_file_writer(log_dir)  # lazily, on the writing process
    with writer.as_default():
        hp.hparams(dict(hparams), trial_id=run_name)
        tf.summary.text("run", tf.constant(", ".join(f"{k}={v}" for k, v in hparams.items())), step=0)
    writer.flush()
    writer.close()


@functools.lru_cache(maxsize=None)
def _hparams_tensorboard(flavour: str) -> type:
    """Keras' TensorBoard of ``flavour`` (tf-keras or Keras 3) plus one HParams record for the run,
    written at the start of training."""
    base = keras_compat.keras_module(flavour).callbacks.TensorBoard

    def __init__(self, log_dir: str, run_name: str, hparams: Mapping[str, Any], **kwargs: Any) -> None:
        base.__init__(self, log_dir=log_dir, **kwargs)
        self.run_name = run_name
        self.hparams = dict(hparams)

    def on_train_begin(self, logs=None) -> None:
        base.on_train_begin(self, logs)
        _write_hparams(self.log_dir, self.run_name, self.hparams)

    return type("HParamsTensorBoard", (base,), {"__init__": __init__, "on_train_begin": on_train_begin,
                                                "__module__": __name__})


class TensorBoardRun(ChiefOnly):
    """Chief-only TensorBoard writing to ``<logdir>/<run_name>/`` with the run's set-up as hparams.

    ``strategy`` (a tfdist strategy; default: the one ``make_strategy`` built) supplies the
    strategy name and worker count; ``batch_size``
    is per worker. Extra ``hparams`` are added to the record; other keyword arguments go to
    Keras' ``TensorBoard`` callback (``histogram_freq``, ``update_freq``, ...): tf-keras' or Keras 3's,
    whichever the model is.
    """

    def __init__(self, logdir: str, run_name: str | None = None, *, strategy: Any = None,
                 batch_size: int | None = None, hparams: Mapping[str, Any] | None = None,
                 is_chief: bool | None = None, **tensorboard_kwargs: Any) -> None:
        strategy = strategy if strategy is not None else current_strategy()
        if is_chief is None and strategy is not None:
            is_chief = bool(strategy.is_chief)
        kind = getattr(strategy, "kind", "single")
        workers = int(strategy.num_workers) if strategy is not None else _runtime.workers()
        replicas = int(strategy.num_replicas_in_sync) if strategy is not None else _runtime.replicas()
        self.run_name = run_name or default_run_name(kind, workers, batch_size)
        self.run_dir = os.path.join(logdir, self.run_name)
        record: dict[str, Any] = {"strategy": kind, "workers": workers}
        if batch_size:
            record.update(batch_size=int(batch_size), global_batch_size=int(batch_size) * replicas)
        record.update(hparams or {})
        self._arguments = (self.run_dir, self.run_name, record, dict(tensorboard_kwargs))
        super().__init__(self._tensorboard(keras_compat.TF_KERAS), is_chief=is_chief)

    def _tensorboard(self, flavour: str) -> Any:
        run_dir, run_name, record, kwargs = self._arguments
        return _hparams_tensorboard(flavour)(run_dir, run_name, record, **kwargs)

    def set_model(self, model) -> None:
        """Write with the TensorBoard callback of the model's Keras (tf-keras or Keras 3)."""
        flavour = keras_compat.flavour_of(model) or keras_compat.TF_KERAS
        if not isinstance(self.callback, _hparams_tensorboard(flavour)):
            self.callback = self._tensorboard(flavour)
        super().set_model(model)
