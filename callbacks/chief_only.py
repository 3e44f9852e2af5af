"""Run a callback on the chief only: progress, checkpoints and logs written once, not N times."""
from __future__ import annotations

import tensorflow as tf

from tfdist.callbacks import _runtime


class ChiefOnly(tf.keras.callbacks.Callback):
    """Forward every hook to ``callback`` on the chief; do nothing on the other ranks.

    For Horovod, where each rank is an independent process. Under tf.distribute multi-worker
    strategies Keras' own ModelCheckpoint and TensorBoard already write on the chief only, and
    they take part in collective ops, so do not wrap them there: ``strategy.fit`` never does.
    """

    def __init__(self, callback: tf.keras.callbacks.Callback, is_chief: bool | None = None) -> None:
        super().__init__()
        self.callback = callback
        self.is_chief = _runtime.is_chief() if is_chief is None else is_chief

    def set_model(self, model) -> None:
        super().set_model(model)
        if self.is_chief:
            self.callback.set_model(model)

    def set_params(self, params) -> None:
        super().set_params(params)
        if self.is_chief:
            self.callback.set_params(params)

    def __getattribute__(self, name: str):
        # Route every on_* hook, and the batch-hook checks Keras makes, to the wrapped callback.
        if name.startswith("on_") or name.startswith("_implements_"):
            if object.__getattribute__(self, "is_chief"):
                return getattr(object.__getattribute__(self, "callback"), name)
            if name.startswith("_implements_"):
                return lambda: False
            return lambda *args, **kwargs: None
        return object.__getattribute__(self, name)
