"""The strategy factory: ``make_strategy(kind, **options)`` over a registry of backends.

    strategy = tfdist.make_strategy("auto")        # see selection.py for the auto table
    strategy = tfdist.make_strategy("horovod", compression="fp16", warmup_epochs=3)
"""
from __future__ import annotations

import dataclasses
import difflib
import logging
import os
from typing import Any

import importlib
from typing import TYPE_CHECKING

from tfdist.strategies.registry import STRATEGIES, UnknownStrategyError
from tfdist.strategies.selection import Selection, select_strategy

if TYPE_CHECKING:
    from tfdist.strategies.base import DistributedStrategy, StrategyOptions

# Importing a backend module registers it. They import TensorFlow, so they load on first use:
# `import tfdist.strategies.selection` stays TensorFlow-free for the pure unit tests.
BACKEND_MODULES = ("single", "mirrored", "multi_worker_mirrored", "horovod", "parameter_server")


def load_backends() -> None:
    from tfdist.keras_compat import require_tf_keras

    require_tf_keras()
    for name in BACKEND_MODULES:
        importlib.import_module(f"tfdist.strategies.{name}")


def __getattr__(name: str) -> Any:
    if name in ("DistributedStrategy", "StrategyOptions"):
        from tfdist.strategies import base

        return getattr(base, name)
    raise AttributeError(f"module 'tfdist.strategies' has no attribute {name!r}")

log = logging.getLogger("tfdist")


def available_strategies() -> list[str]:
    """Every name ``make_strategy`` accepts: ``auto``, then the backends alphabetically."""
    load_backends()
    return ["auto", *sorted(STRATEGIES.names())]


def option_names(kind: str) -> list[str]:
    """The keyword options backend ``kind`` accepts."""
    load_backends()
    return [field.name for field in dataclasses.fields(STRATEGIES.get(kind).Options)]


def _all_option_names() -> set[str]:
    return {name for kind in STRATEGIES.names() for name in option_names(kind)}


def build_options(kind: str, options: dict[str, Any], *, lenient: bool = False) -> "StrategyOptions":
    """Validate ``options`` against backend ``kind``'s option dataclass.

    ``lenient`` (used by ``auto``) drops options that belong to another backend, so one script
    can name Horovod options and still run as a single process.
    """
    valid = option_names(kind)
    unknown = sorted(set(options) - set(valid))
    if lenient:
        foreign = [name for name in unknown if name in _all_option_names()]
        if foreign:
            log.debug("auto chose %s; ignoring options of other backends: %s", kind, foreign)
        unknown = [name for name in unknown if name not in foreign]
        options = {k: v for k, v in options.items() if k in valid}
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, valid, n=1)
            hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
        raise TypeError(f"unknown option(s) for strategy {kind!r}: {', '.join(hints)}; "
                        f"valid options: {', '.join(valid)}")
    return STRATEGIES.get(kind).Options(**options)


def local_gpu_count() -> int:
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def make_strategy(kind: str = "auto", **options: Any) -> "DistributedStrategy":
    """Build the strategy ``kind`` ("auto", "horovod", "parameter_server",
    "multi_worker_mirrored", "mirrored" or "single") with backend ``options``.

        strategy = tfdist.make_strategy("auto")
        with strategy.scope():
            model = build_model()
            model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(1e-3)), loss="mse")
        strategy.fit(model, x, y, batch_size=64, epochs=3)
    """
    load_backends()
    lenient = kind == "auto"
    if lenient:
        selection = select_strategy(os.environ, local_gpu_count())
        log.info("tfdist auto strategy: %s (%s)", selection.kind, selection.reason)
        kind = selection.kind
    backend = STRATEGIES.get(kind)
    return backend(build_options(kind, options, lenient=lenient))


__all__ = [
    "DistributedStrategy",
    "STRATEGIES",
    "Selection",
    "StrategyOptions",
    "UnknownStrategyError",
    "available_strategies",
    "build_options",
    "load_backends",
    "make_strategy",
    "option_names",
    "select_strategy",
]
