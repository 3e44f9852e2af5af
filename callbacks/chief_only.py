"""Run a callback on the chief only: progress, checkpoints and logs written once, not N times."""
from __future__ import annotations

from typing import Any, Iterable

import tf_keras  # tfdist's callbacks are tf-keras callbacks that Keras 3's fit takes too

from tfdist import upstream
from tfdist.callbacks import _runtime


class ChiefOnly(tf_keras.callbacks.Callback):
    """Forward every hook to ``callback`` on the chief; do nothing on the other ranks.

    ``is_chief`` defaults to what the running job says when training starts: the strategy
    ``tfdist.make_strategy`` built, else Horovod's rank, else the model's tf.distribute cluster.
    ``everywhere`` names hooks that run on every rank, e.g. ``("on_train_begin",)`` for a
    BackupAndRestore whose state every rank must load while only the chief writes it.

    Wraps a callback of either Keras (tf-keras or Keras 3). For Horovod, where each rank is an
    independent process. Under tf.distribute multi-worker
    strategies Keras' own ModelCheckpoint and BackupAndRestore already write on the chief only,
    and they take part in collective ops, so do not wrap them there: ``strategy.fit`` never does.
    """

    def __init__(self, callback: Any, is_chief: bool | None = None,
                 everywhere: Iterable[str] = ()) -> None:
        super().__init__()
        self.callback = callback
        self._is_chief = is_chief
        self.everywhere = frozenset(everywhere)

    @property
    def is_chief(self) -> bool:
        if self._is_chief is None:
            self._is_chief = _runtime.is_chief(self.model)
        return self._is_chief

    def _runs(self, hook: str) -> bool:
        return self.is_chief or hook in self.everywhere

    def set_model(self, model) -> None:
        super().set_model(model)
        if self.is_chief or self.everywhere:  # TensorBoard.set_model already writes the graph
            self.callback.set_model(model)

    def set_params(self, params) -> None:
        super().set_params(params)
        if self.is_chief or self.everywhere:
            self.callback.set_params(params)

    def __getattribute__(self, name: str):
        # Route every on_* hook, and the batch-hook checks Keras makes, to the wrapped callback.
        if name.startswith("on_") or name in upstream.BATCH_HOOK_CHECKS:
            if object.__getattribute__(self, "_runs")(name):
                return getattr(object.__getattribute__(self, "callback"), name)
            if name in upstream.BATCH_HOOK_CHECKS:
                return lambda: False
            return lambda *args, **kwargs: None
        return object.__getattribute__(self, name)
