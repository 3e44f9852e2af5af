"""The object ``make_strategy`` returns: one way to compile and fit on every backend."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, ClassVar, Iterator

import tensorflow as tf

from tfdist.keras_compat import check_keras_object

log = logging.getLogger("tfdist")
_SCALED_MARK = "_tfdist_lr_scaled"
DEFAULT_BATCH_SIZE = 32  # Keras' default, per replica here


def require_number(name: str, value: Any, minimum: float, integer: bool = False) -> None:
    """Raise ``ValueError`` naming option ``name`` unless ``value`` is a number >= ``minimum``."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"`{name}` must be {kind} >= {minimum:g}, got {value!r}; "
                         f"fix: pass {name}={max(minimum, 1) if integer else minimum:g} or more")


@dataclasses.dataclass(frozen=True)
class StrategyOptions:
    """Options every backend accepts.

    scale_lr: multiply the optimizer's learning rate by ``lr_scale`` in ``optimizer()``.
    shard_data: split numpy inputs and datasets by rank (Horovod) or batch them globally
        (tf.distribute); off when your input pipeline already does it.
    """

    scale_lr: bool = True
    shard_data: bool = True


def _is_array_input(x: Any) -> bool:
    """numpy arrays, tensors, or lists/dicts of them: what Keras batches with ``batch_size``."""
    import numpy as np

    leaves = tf.nest.flatten(x)
    return bool(leaves) and all(isinstance(leaf, (np.ndarray, tf.Tensor)) for leaf in leaves)


class DistributedStrategy:
    """Base of every backend. Subclasses set ``Options`` and override the ``_`` hooks.

        strategy = tfdist.make_strategy("auto")
        with strategy.scope():
            model = build_model()
            model.compile(optimizer=strategy.optimizer(tf.keras.optimizers.Adam(1e-3)), loss="mse")
        strategy.fit(model, x, y, batch_size=64, epochs=3)   # batch_size is per replica

    ``batch_size`` (and a dataset batched by tfdist) is always per replica; the global batch is
    ``batch_size * num_replicas_in_sync``.
    """

    kind: ClassVar[str] = "base"
    Options: ClassVar[type[StrategyOptions]] = StrategyOptions

    def __init__(self, options: StrategyOptions) -> None:
        self.options = options

    # --- identity -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's index among the training processes (0 is the chief)."""
        return 0

    @property
    def size(self) -> int:
        """Replicas kept in sync (Horovod: processes; tf.distribute: replicas)."""
        return self.num_replicas_in_sync

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def num_workers(self) -> int:
        """Processes that run training steps."""
        return 1

    @property
    def num_replicas_in_sync(self) -> int:
        strategy = self.tf_strategy
        return strategy.num_replicas_in_sync if strategy is not None else 1

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def tf_strategy(self) -> tf.distribute.Strategy | None:
        """The underlying ``tf.distribute.Strategy``; ``None`` for Horovod."""
        return None

    @property
    def lr_scale(self) -> float:
        """Factor ``optimizer()`` applies to the learning rate when ``scale_lr`` is on."""
        return float(self.num_replicas_in_sync)

    def __repr__(self) -> str:
        return (f"<tfdist {self.kind} strategy rank={self.rank} size={self.size} "
                f"workers={self.num_workers} chief={self.is_chief}>")

    # --- model building -----------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Create the model and optimizer inside this scope."""
        strategy = self.tf_strategy
        with (strategy.scope() if strategy is not None else contextlib.nullcontext()):
            yield

    def optimizer(self, optimizer: Any, scale_lr: bool | None = None) -> Any:
        """Prepare a tf-keras optimizer: scale its learning rate, then wrap it for the backend."""
        check_keras_object(optimizer, "optimizer")
        if isinstance(optimizer, tf.keras.optimizers.legacy.Optimizer):
            raise TypeError(f"`optimizer` is a legacy optimizer ({type(optimizer).__name__}); fix: use "
                            f"tf.keras.optimizers.{type(optimizer).__name__} instead of tf.keras.optimizers.legacy")
        if not isinstance(optimizer, tf.keras.optimizers.Optimizer):
            raise TypeError(f"`optimizer` must be a tf.keras optimizer instance, got {optimizer!r}; "
                            "fix: pass e.g. tf.keras.optimizers.Adam(1e-3), not a string")
        scale = self.options.scale_lr if scale_lr is None else scale_lr
        if scale and self.lr_scale != 1.0 and getattr(optimizer, _SCALED_MARK, False):
            raise ValueError("this optimizer's learning rate was already scaled by strategy.optimizer(); "
                             "fix: pass a new optimizer, or scale_lr=False")
        if scale and self.lr_scale != 1.0:
            from tfdist.callbacks.learning_rate import uses_schedule

            if uses_schedule(optimizer):
                raise TypeError(
                    "cannot scale a LearningRateSchedule by the number of replicas; fix: pass "
                    "scale_lr=False and scale the schedule yourself, or use a float learning rate")
            optimizer.learning_rate = float(tf.keras.backend.get_value(optimizer.learning_rate)) * self.lr_scale
            setattr(optimizer, _SCALED_MARK, True)
        return self._wrap_optimizer(optimizer)

    def _wrap_optimizer(self, optimizer: Any) -> Any:
        return optimizer

    # --- training -----------------------------------------------------------------------------
    def fit(self, model: Any, x: Any = None, y: Any = None, **fit_kwargs: Any) -> Any:
        """``model.fit`` with the backend's data handling and callbacks; returns the History."""
        self._check_model(model)
        kwargs = dict(fit_kwargs)
        callbacks = list(kwargs.pop("callbacks", None) or [])
        x, y, kwargs = self._prepare_fit_inputs(x, y, kwargs)
        kwargs["callbacks"] = self._fit_callbacks(callbacks, kwargs)
        if not self.is_chief:
            kwargs["verbose"] = 0
        return model.fit(x, y, **kwargs)

    def evaluate(self, model: Any, x: Any = None, y: Any = None, **evaluate_kwargs: Any) -> Any:
        """``model.evaluate`` with the same data handling; every rank gets the global result."""
        self._check_model(model)
        kwargs = dict(evaluate_kwargs)
        x, y, kwargs = self._prepare_evaluate_inputs(x, y, kwargs)
        if not self.is_chief:
            kwargs["verbose"] = 0
        return self._reduce_evaluation(model.evaluate(x, y, **kwargs))

    def throughput(self, batch_size: int, **kwargs: Any) -> Any:
        """A ``Throughput`` callback that knows how many replicas consume ``batch_size`` each."""
        from tfdist.callbacks import Throughput

        return Throughput(batch_size, replicas=self.num_replicas_in_sync, workers=self.num_workers, **kwargs)

    # --- hooks ----------------------------------------------------------------------------------
    def _check_model(self, model: Any) -> None:
        check_keras_object(model, "model")
        if getattr(model, "optimizer", None) is None:
            raise ValueError("the model is not compiled; fix: call model.compile(optimizer="
                             "strategy.optimizer(...), loss=...) inside strategy.scope() first")

    def _prepare_fit_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return self._global_batching(x, y, kwargs)

    def _prepare_evaluate_inputs(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        return self._global_batching(x, y, kwargs)

    def _fit_callbacks(self, callbacks: list, kwargs: dict) -> list:
        return callbacks

    def _reduce_evaluation(self, result: Any) -> Any:
        return result

    def _global_batching(self, x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
        """tf.distribute splits a global batch over replicas: scale per-replica sizes up."""
        from tfdist.strategies.data import is_dataset

        replicas = self.num_replicas_in_sync
        batch_size = kwargs.get("batch_size")
        if batch_size is None:
            if x is None or is_dataset(x) or not _is_array_input(x):
                return x, y, kwargs
            batch_size = DEFAULT_BATCH_SIZE  # per replica, as under Horovod
        global_batch = int(batch_size) * replicas
        if is_dataset(x):  # a dataset passed with batch_size holds single examples
            x = x.batch(global_batch)
            del kwargs["batch_size"]
            validation = kwargs.get("validation_data")
            if is_dataset(validation):
                kwargs["validation_data"] = validation.batch(global_batch)
        else:
            kwargs["batch_size"] = global_batch
        return x, y, kwargs
