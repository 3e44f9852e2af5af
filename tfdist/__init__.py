"""tfdist: one API to train a Keras model (tf-keras or Keras 3) with Horovod or tf.distribute.

    import tfdist                       # before tensorflow: tf.keras is tf-keras unless TF_USE_LEGACY_KERAS is set
    strategy = tfdist.make_strategy("auto")
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(1e-3)), loss="mse")
    strategy.fit(model, dataset, epochs=5, steps_per_epoch=100)

Importing tfdist does not import TensorFlow; ``make_strategy`` does.
"""
from __future__ import annotations

from typing import Any

from tfdist.errors import TfdistError
from tfdist.keras_compat import KerasVersionError, ensure_legacy_keras
from tfdist.version import __version__

ensure_legacy_keras()

_LAZY = {
    "make_strategy": "tfdist.strategies",
    "available_strategies": "tfdist.strategies",
    "select_strategy": "tfdist.strategies.selection",
    "current_strategy": "tfdist.runtime.state",
    "options_for": "tfdist.strategies.options",
}


_LAZY_MODULES = ("callbacks",)  # `tfdist.callbacks.X` after a plain `import tfdist`


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f"tfdist.{name}")
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tfdist' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)


__all__ = ["KerasVersionError", "TfdistError", "__version__", "available_strategies", "callbacks",
           "current_strategy", "make_strategy", "options_for", "select_strategy"]
