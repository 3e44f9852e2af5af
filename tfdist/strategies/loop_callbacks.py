"""Keras callbacks in a custom loop: tfdist's run figures, TensorBoard runs and the plan's check.

``strategy.callbacks(...)`` returns the Keras ``CallbackList`` a loop drives itself, as in Keras'
"writing a training loop from scratch" guide, with what ``fit`` would add:

    callbacks = strategy.callbacks([*strategy.metrics(32), TensorBoardRun("runs", strategy=strategy)],
                                   data, epochs)
    callbacks.on_train_begin()
    for epoch in range(start, epochs):
        callbacks.on_epoch_begin(epoch)
        logs = strategy.reduce("sum", [train_step(iterator) for _ in range(data.steps_per_epoch)])
        callbacks.on_epoch_end(epoch, logs)       # examples/s, per-worker figures, TensorBoard
    callbacks.on_train_end()

The list has the loop's ``steps_per_epoch`` and ``epochs`` as its params (``Throughput`` counts
examples from them). A strategy built from a plan (``TFDIST_PLAN``, ``tfdist launch --backend auto``)
adds a ``Throughput`` when none is given and ``PlanCheck`` last, so the run is measured against its
prediction and the launcher prints the comparison, as after ``fit``. Callbacks that only ``fit`` can
drive are refused with the loop's own way to do the same.
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from tfdist import keras_compat, run_channel
from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix

log = logging.getLogger("tfdist")

#: Callbacks that hook into ``Model.fit``'s own state, and what a loop uses instead.
_FIT_ONLY = {
    "BackupAndRestore": "save and resume with strategy.checkpoint(directory): restore() before the loop, "
                        "save(epoch + 1) after each epoch",
    "SafeBackup": "save and resume with strategy.checkpoint(directory)",
    "ProgbarLogger": "print the reduced logs yourself (strategy.reduce gives them on every process)",
}


def fit_only_refusal(callbacks: Sequence[Any]) -> str | None:
    """Why ``callbacks`` cannot run in a loop (the first that cannot, with the fix), or None. Pure."""
    for index, callback in enumerate(callbacks):
        inner = getattr(callback, "callback", callback)  # a ChiefOnly wraps the real one
        for name, fix in _FIT_ONLY.items():
            if keras_compat.has_class_named(inner, name):
                return with_fix(f"`callbacks[{index}]` is a {type(inner).__name__}, which only Model.fit drives "
                                "(it reads fit's own training state)", fix)
    return None


def callback_list(strategy: Any, callbacks: Any, model: Any, optimizer: Any, steps_per_epoch: int, epochs: int,
                  batch_size: int) -> Any:
    """The Keras ``CallbackList`` (the model's Keras) of ``callbacks`` for a loop of ``epochs`` epochs
    of ``steps_per_epoch`` steps at ``batch_size`` per replica, measured against the strategy's plan.
    An uncompiled ``model`` gets the loop's ``optimizer`` as ``model.optimizer``, as ``compile`` would
    give it: the callbacks read the learning rate there (Keras 3's TensorBoard fails without it)."""
    if callbacks is None:
        callbacks = []
    if not isinstance(callbacks, (list, tuple)):
        raise ArgumentTypeError(with_fix(f"`callbacks` must be a list of Keras callbacks, got {type(callbacks).__name__}",
                                         "pass e.g. [*strategy.metrics(32), TensorBoardRun('runs')]"))
    for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ArgumentValueError(with_fix(f"`{name}` must be an integer >= 1, got {value!r}",
                                              "pass the loop's epochs and data.steps_per_epoch"))
    refusal = fit_only_refusal(callbacks)
    if refusal is not None:
        raise ArgumentValueError(refusal)
    keras_compat.check_callbacks_flavour(model, callbacks)
    found = list(callbacks)
    if strategy.plan is not None:
        found = strategy._with_plan_check(found, batch_size)
        if run_channel.folder_from_env() is not None and strategy.is_chief:
            log.warning("tfdist adapt: a custom loop does not switch plans mid-run; it trains on %s to the end "
                        "(strategy.fit adapts)", strategy.plan.variant)
    if getattr(model, "optimizer", None) is None:
        model.optimizer = optimizer
    keras = keras_compat.keras_of(model, "model")
    return keras.callbacks.CallbackList(found, add_history=False, add_progbar=False, model=model,
                                        epochs=epochs, steps=steps_per_epoch, verbose=0)


__all__ = ["callback_list", "fit_only_refusal"]
