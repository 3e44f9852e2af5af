"""The strategy factory: ``make_strategy(kind, **options)`` over a registry of backends.

    strategy = tfdist.make_strategy("auto")        # see selection.py for the auto table
    strategy = tfdist.make_strategy("horovod", compression="fp16", warmup_epochs=3)

Layering: beside ``tfdist.horovod``: it may import :mod:`tfdist.callbacks`, :mod:`tfdist.export`,
:mod:`tfdist.runtime`, :mod:`tfdist.plan`, :mod:`tfdist.environments`, :mod:`tfdist.cluster` and the
ground modules; never the advisor, the probe, the launcher or the CLI.
"""
from __future__ import annotations

import importlib
import logging
import os
from typing import TYPE_CHECKING, Any

from tfdist.environments import detect_environment
from tfdist.errors import with_fix
from tfdist.runtime.state import current_strategy, set_current
from tfdist.strategies.options import (OptionValueError, StrategyOptions, UnknownOptionError, field_names,
                                       options_for)
from tfdist.strategies.options import build_options as _build_options
from tfdist.strategies.planning import resolve_plan
from tfdist.strategies.registry import STRATEGIES, UnknownStrategyError
from tfdist.strategies.selection import Selection, select_strategy

if TYPE_CHECKING:
    from tfdist.strategies.base import DistributedStrategy

# Importing a backend module registers it. They import TensorFlow, so they load on first use:
# `import tfdist.strategies.selection` stays TensorFlow-free for the pure unit tests.
BACKEND_MODULES = ("single", "mirrored", "multi_worker_mirrored", "horovod", "parameter_server")


def load_backends() -> None:
    from tfdist.keras_compat import require_tf_keras

    require_tf_keras()
    for name in BACKEND_MODULES:
        importlib.import_module(f"tfdist.strategies.{name}")


def __getattr__(name: str) -> Any:
    if name == "DistributedStrategy":
        from tfdist.strategies import base

        return base.DistributedStrategy
    raise AttributeError(f"module 'tfdist.strategies' has no attribute {name!r}")

log = logging.getLogger("tfdist")


def available_strategies() -> list[str]:
    """Every name ``make_strategy`` accepts: ``auto``, then the backends alphabetically."""
    load_backends()
    return ["auto", *sorted(STRATEGIES.names())]


def option_names(kind: str) -> list[str]:
    """The keyword options backend ``kind`` accepts."""
    load_backends()
    return field_names(STRATEGIES.get(kind).Options)


def build_options(kind: str, options: dict[str, Any], *, auto: bool = False) -> StrategyOptions:
    """Check ``options`` for backend ``kind`` (see ``tfdist.strategies.options`` for the rule)."""
    load_backends()
    STRATEGIES.get(kind)  # an unknown kind fails with the list of names first
    option_types = {name: STRATEGIES.get(name).Options for name in STRATEGIES.names()}
    return _build_options(kind, options, option_types, auto=auto)


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

    Under ``auto``, a plan named by ``TFDIST_PLAN`` (``tfdist advise --save``, ``tfdist launch --backend
    auto``) adds its options; the ones given here win (``tfdist.strategies.planning``).
    """
    load_backends()
    refuse_keras_distribution()
    auto = kind == "auto"
    if auto:
        selection = select_strategy(os.environ, local_gpu_count())
        log.info("tfdist auto strategy: %s (%s)", selection.kind, selection.reason)
        kind, detected = selection.kind, selection.environment
    else:
        detected = None
    backend = STRATEGIES.get(kind)
    # Detected once (TF_CONFIG read once), then handed to the plan check and to the backend.
    environment = backend.environment_for(detected if detected is not None else detect_environment(os.environ))
    option_types = {name: STRATEGIES.get(name).Options for name in STRATEGIES.names()}
    resolved = resolve_plan(kind, os.environ, options, option_types, auto=auto,  # checks the plan's values
                            environment=environment)
    for notice in resolved.notices:
        log.warning("%s", notice)
    strategy = backend(build_options(kind, resolved.options, auto=auto), environment)
    strategy.plan = resolved.plan
    set_current(strategy)
    strategy.take_role()  # ps and worker tasks of a parameter-server job serve here and exit
    return strategy


def refuse_keras_distribution(modules: dict[str, Any] | None = None) -> None:
    """Refuse a Keras 3 ``keras.distribution`` set on the TensorFlow backend: there its
    ``distribution_lib`` is a prototype, so a ``ModelParallel`` with a ``LayoutMap`` leaves every
    variable whole on one device and ``fit`` runs without a word. Keras not imported: nothing set."""
    import sys

    keras = (sys.modules if modules is None else modules).get("keras")
    if keras is None or not hasattr(keras, "distribution"):
        return
    distribution = keras.distribution.distribution()
    if distribution is None or keras.backend.backend() != "tensorflow":
        return
    raise OptionValueError(with_fix(
        f"keras.distribution is set to a {type(distribution).__name__} on the TensorFlow backend, where Keras' "
        "distribution API is a prototype that shards nothing (variables stay whole, fit ignores it), and "
        "tfdist does not combine it with a strategy",
        "call keras.distribution.set_distribution(None); for a model bigger than one device use "
        "make_strategy('parameter_server', shards=N) (variables split over N ps tasks), for data "
        "parallelism make_strategy('horovod') or make_strategy('mirrored')"))


__all__ = [
    "DistributedStrategy",
    "OptionValueError",
    "STRATEGIES",
    "Selection",
    "StrategyOptions",
    "UnknownOptionError",
    "UnknownStrategyError",
    "available_strategies",
    "current_strategy",
    "build_options",
    "load_backends",
    "make_strategy",
    "option_names",
    "options_for",
    "select_strategy",
]
