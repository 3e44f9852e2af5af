"""Keras' progress line without the per-worker figures: loss, the model's metrics, examples/s.

    strategy.metrics(64)                     # Throughput, ParameterServerMetrics, a progress line
    strategy.metrics(64, show_workers=True)  # no progress line: Keras' own prints every figure

``WorkerMetrics`` and ``ParameterServerMetrics`` put their figures (``worker/<i>/...``, the spread,
``comm_*``, ``coordinator_step_ms``, ...) into the epoch logs, which is how ``History``,
``TensorBoardRun`` and so ``tfdist report`` get them. Keras' progress bar prints every key of those
logs too: some 900 characters an epoch with two workers. The progress line here is Keras' own
progress bar (a ``ProgbarLogger``: Keras finds it among the callbacks and adds none of its own)
that leaves out the keys its ``quiet`` callbacks logged (their ``logged_keys``); the logs
themselves are untouched. It prints each epoch's line when the next epoch begins or training
ends, so after every callback's ``on_epoch_end``, where Keras' own bar prints it: what callbacks
after it add (``lr``, ...) is on the line.

A Keras finds only its own ``ProgbarLogger`` class, so ``progress_lines`` gives one line per Keras
imported (tf-keras always; Keras 3 when something imported it): each prints for models of its
Keras and does nothing for the other's.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Iterable

from tfdist import keras_compat, upstream
from tfdist.errors import ArgumentValueError, with_fix


def progress_lines(quiet: Iterable[Any]) -> list:
    """Progress bars, one per Keras imported, that print what Keras' would minus the keys the
    ``quiet`` callbacks logged (each has ``logged_keys``, the keys of its last ``on_epoch_end``)."""
    quiet = list(quiet)
    for callback in quiet:
        if not hasattr(callback, "logged_keys"):
            raise ArgumentValueError(with_fix(
                f"`quiet` callbacks must say which keys they log (`logged_keys`), and "
                f"{type(callback).__name__} does not", "pass WorkerMetrics or ParameterServerMetrics"))
    flavours = tuple(flavour for flavour, package in keras_compat.PACKAGES.items() if package in sys.modules)
    return [_line_class(flavour)(quiet, flavours) for flavour in flavours]


class _Line:
    """What the per-Keras progress line classes share: a fresh Keras progress bar for every
    ``fit``/``evaluate``/``predict`` (Keras sets the params of each), fed the same hooks, with
    each epoch's logs held back until the next epoch begins or training ends and then printed
    without the quiet keys."""

    flavour: str

    def __init__(self, quiet: list, flavours: tuple[str, ...]) -> None:
        # Configured as Keras' own bar, so what tf-keras asks of it (batch hooks? tensor logs?) is
        # answered as that bar would.
        super().__init__(**self._bar_arguments())
        self.quiet = quiet
        self._flavours = flavours
        self._active = False      # whether the model is of this line's Keras
        self._bar: Any = None     # Keras' own progress bar for the current call; None: not this Keras
        self._pending: tuple[int, dict] | None = None

    @classmethod
    def _base(cls) -> type:
        return keras_compat.keras_module(cls.flavour).callbacks.ProgbarLogger

    @classmethod
    def _bar_arguments(cls) -> dict:
        """What Keras passes when it adds its own bar (tf-keras counts steps; Keras 3 takes none)."""
        return {"count_mode": "steps"} if cls.flavour == keras_compat.TF_KERAS else {}

    # --- set-up: Keras calls set_model, then set_params, once per fit / evaluate / predict -----
    def set_model(self, model: Any) -> None:
        super().set_model(model)
        flavour = keras_compat.flavour_of(model)
        if flavour is not None and flavour not in self._flavours:
            raise ArgumentValueError(with_fix(
                f"this progress line was made before {keras_compat.PACKAGES[flavour]} was imported, so it "
                "cannot stand in for that Keras' progress bar", "import your Keras before calling "
                "strategy.metrics(...), or pass show_workers=True"))
        self._active = flavour == self.flavour

    def set_params(self, params: dict) -> None:
        super().set_params(params)
        self._pending, self._bar = None, None
        if self._active:
            self._bar = self._base()(**self._bar_arguments())
            self._bar.set_model(self.model)
            self._bar.set_params(params)

    # --- the epoch line --------------------------------------------------------------------------
    def shown(self, logs: dict | None) -> dict:
        """``logs`` without the keys the quiet callbacks logged."""
        hidden = set().union(*(callback.logged_keys for callback in self.quiet))
        return {key: value for key, value in (logs or {}).items() if key not in hidden}

    def _flush(self) -> None:
        if self._pending is not None:
            epoch, logs = self._pending
            self._pending = None
            self._bar.on_epoch_end(epoch, self.shown(logs))

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        if self._bar is not None:
            self._flush()
            self._bar.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        if self._bar is not None:  # the same dict every later callback adds to
            self._pending = (epoch, logs if logs is not None else {})

    def on_train_end(self, logs=None) -> None:
        if self._bar is not None:
            self._flush()
            self._bar.on_train_end(logs)


def _forward(hook: str):
    def forward(self: Any, *args: Any, **kwargs: Any) -> None:
        if self._bar is not None:
            getattr(self._bar, hook)(*args, **kwargs)
    forward.__name__ = hook
    return forward


def _no_batch_hooks(self: Any) -> bool:
    return False


_FORWARDED = ("on_train_begin", "on_test_begin", "on_test_end", "on_predict_begin", "on_predict_end",
              "on_train_batch_begin", "on_train_batch_end", "on_test_batch_begin", "on_test_batch_end",
              "on_predict_batch_begin", "on_predict_batch_end")


@functools.lru_cache(maxsize=None)
def _line_class(flavour: str) -> type:
    """The progress line for ``flavour``'s fit: a subclass of its ``ProgbarLogger``."""
    base = keras_compat.keras_module(flavour).callbacks.ProgbarLogger
    namespace = {name: _forward(name) for name in _FORWARDED}
    if flavour != keras_compat.TF_KERAS:
        # tf-keras asks every callback these; a Keras 3 line in a tf-keras fit has nothing to do.
        namespace.update({name: _no_batch_hooks for name in upstream.BATCH_HOOK_CHECKS})
    namespace.update(flavour=flavour, __module__=__name__, __doc__=(
        f"Keras' progress bar for {keras_compat.PACKAGES[flavour]} models, without the figures of its "
        "quiet callbacks (see ``tfdist.callbacks.progress``)."))
    return type("ProgressLine", (_Line, base), namespace)
