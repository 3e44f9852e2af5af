"""TensorBoard logs that let runs be compared: one directory per run, tagged with its set-up.

    tb = TensorBoardRun("runs", strategy=strategy, batch_size=64, targets={"val_accuracy": 0.95})
    strategy.fit(model, x, y, callbacks=[strategy.throughput(64), tb])
    strategy.evaluate(model, x_test, y_test, callbacks=[tb])   # test figures into the run's record
    # tensorboard --logdir runs    -> Scalars: one curve per run; HParams: strategy, workers, ...

Only the chief writes. Each run lands in ``<logdir>/<run-name>/`` (``train/`` and
``validation/`` below it, as Keras writes them) and records its hyperparameters (strategy,
workers, per-worker and global batch, plus any you add) with the HParams plugin.

The run's main folder also holds the run's results as scalars, which TensorBoard's HParams tab
shows as metric columns next to the hyperparameters (it takes every scalar tag of a run's folder
and sub-folders as a metric, at its last value):

| tag (main folder)                          | value                                                     |
|--------------------------------------------|-----------------------------------------------------------|
| ``time_to_target/<metric><op><threshold>`` | seconds from the start of training to the end of the      |
|                                            | first epoch whose ``<metric>`` met it; NaN: never reached  |
| ``target_reached/<metric><op><threshold>`` | 1.0 (both written when reached), or 0.0 and NaN written   |
|                                            | at the end of fit when never reached                      |
| ``train_time_s``                           | ``wall_time_s`` of the last epoch                          |
| ``mean_examples_per_second``,              | ``Throughput``'s summary (its ``summary()``), the first    |
| ``mean_examples_per_second_per_worker``,   | epoch left out unless ``include_first_epoch=True``         |
| ``mean_step_time_ms``                      |                                                            |
| ``evaluate/<metric>``                      | an ``evaluate`` given this callback, or ``record_evaluation`` |
| ``advice/predicted_examples_per_second``,  | a run built from a plan (``TFDIST_PLAN``): the prediction, |
| ``advice/predicted_step_ms``,              | at the step of the first epoch it trains (0; an adaptive   |
| ``advice/segment/<variant>``               | run's next plan: the epochs done when it took over), the   |
|                                            | plan in the HParams and ``plan.json``                      |
| ``advice/measured_examples_per_second``,   | the same run's ``Throughput`` figure each epoch, its step  |
| ``advice/measured_step_ms``,               | time by the plan's definition, and their ratio to the      |
| ``advice/measured_over_predicted``         | prediction                                                 |

The step of each is the epoch (1-based) it was taken at. An adaptive run (``tfdist launch --backend
auto``) writes one segment per plan into the same run: each plan's ``advice/segment/<variant>`` and
prediction at the epochs done when it took over, so its epochs' ``advice/measured_*`` are against
its own plan, and its ``wall_time_s`` continues the last plan's (the switch included). ``wall_time_s`` comes from ``Throughput``
when it runs before this callback; otherwise this callback stamps it into the epoch logs itself.

The HParams record also holds ``learning_rate``: the rate the model's optimizer holds when training
starts, read from the optimizer then, so it is the rate the run trains at (``strategy.optimizer()``
has scaled it by the replicas by then; a warm-up ramps up to it). A ``lr`` or ``learning_rate`` given
in ``hparams`` that differs from it is logged as a warning (the record keeps ``lr`` as given and
``learning_rate`` as trained).
"""
from __future__ import annotations

import functools
import logging
import math
import numbers
import os
import time
from typing import Any, Mapping

import tensorflow as tf

from tfdist import keras_compat, run_channel
from tfdist.callbacks import _runtime
from tfdist.callbacks.chief_only import ChiefOnly
from tfdist.callbacks.learning_rate import learning_rate_value
from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix
from tfdist.runtime.state import current_strategy

#: Comparisons a target may use.
AT_LEAST, AT_MOST = ">=", "<="
#: The HParam that holds the rate the run trains at (see the module doc).
LEARNING_RATE = "learning_rate"
_USER_RATE_KEYS = ("lr", LEARNING_RATE)
_log = logging.getLogger("tfdist")


def trained_learning_rate(model: Any) -> float | None:
    """The rate ``model``'s optimizer holds now, to float32's 7 digits (``0.002``, not
    ``0.0020000000949949026``); None for a model without an optimizer (only evaluated)."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not hasattr(optimizer, "learning_rate"):
        return None
    return float(f"{learning_rate_value(optimizer):.7g}")


def with_learning_rate(hparams: Mapping[str, Any], rate: float | None) -> dict[str, Any]:
    """``hparams`` with ``learning_rate`` set to ``rate``, the rate the run trains at; a ``lr`` or
    ``learning_rate`` in ``hparams`` that says otherwise is logged as a warning."""
    record = dict(hparams)
    if rate is None:
        return record
    for key in _USER_RATE_KEYS:
        given = _number(record.get(key))
        if given is not None and not math.isclose(given, rate, rel_tol=1e-6):
            _warn_rate(key, given, rate)
    record[LEARNING_RATE] = rate
    return record


@functools.lru_cache(maxsize=64)
def _warn_rate(key: str, given: float, rate: float) -> None:
    """Once per process and figures (an elastic fit starts training at every attempt)."""
    _log.warning("TensorBoardRun: hparams[%r]=%g is not the rate the optimizer trains at, %g "
                 "(strategy.optimizer() scales the rate by the replicas); the run records %s=%g; fix: leave "
                 "the rate out of `hparams` (TensorBoardRun records it)", key, given, rate, LEARNING_RATE, rate)


def default_run_name(kind: str, workers: int, batch_size: int | None, adaptive_folder: str | None = None) -> str:
    """``horovod-2w-b64-20261130-041500``: set-up first, then a timestamp for uniqueness. In an adaptive
    run (``adaptive_folder``, its run folder), one name for every plan it runs, from the run folder's:
    ``auto-b64-plan-20261130-041500``."""
    batch = f"-b{batch_size}" if batch_size else ""
    if adaptive_folder is not None:
        return f"auto{batch}-{os.path.basename(os.path.normpath(adaptive_folder)).removesuffix('.run')}"
    return f"{kind}-{workers}w{batch}-{time.strftime('%Y%m%d-%H%M%S')}"


def parse_targets(targets: Mapping[str, Any] | None) -> dict[str, tuple[str, str, float]]:
    """``{"val_accuracy": 0.95, "val_loss": ("<=", 0.1)}`` -> ``{tag name: (metric, op, threshold)}``.

    A bare number means ``>=``, or ``<=`` when ``loss`` is in the metric's name (lower is better).
    """
    if targets is None:
        return {}
    if not isinstance(targets, Mapping):
        raise ArgumentTypeError(with_fix(
            f"`targets` must be a dict of metric name to threshold, got {type(targets).__name__}",
            "pass e.g. targets={'val_accuracy': 0.95} or targets={'val_loss': ('<=', 0.1)}"))
    parsed: dict[str, tuple[str, str, float]] = {}
    for metric, target in targets.items():
        if not isinstance(metric, str) or not metric:
            raise ArgumentValueError(with_fix(f"`targets` keys must be metric names, got {metric!r}",
                                              "use the names fit logs, e.g. 'val_accuracy' or 'loss'"))
        op = AT_MOST if "loss" in metric else AT_LEAST
        threshold = target
        if isinstance(target, (tuple, list)):
            if len(target) != 2 or target[0] not in (AT_LEAST, AT_MOST):
                raise ArgumentValueError(with_fix(
                    f"`targets[{metric!r}]` must be a threshold or ('>=' | '<=', threshold), got {target!r}",
                    f"pass e.g. targets={{{metric!r}: ('<=', 0.1)}}"))
            op, threshold = target
        if (isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)
                or not math.isfinite(threshold)):
            raise ArgumentValueError(with_fix(
                f"`targets[{metric!r}]` must be a finite number, got {threshold!r}",
                f"pass e.g. targets={{{metric!r}: 0.95}}"))
        parsed[f"{metric}{op}{float(threshold):g}"] = (metric, op, float(threshold))
    return parsed


def _write_hparams(log_dir: str, run_name: str, hparams: Mapping[str, Any]) -> None:
    """One HParams record (and a text summary of it) for the run, in ``log_dir``."""
    from tensorboard.plugins.hparams import api as hp

    writer = tf.summary.create_file_writer(log_dir)  # lazily, on the writing process
    with writer.as_default():
        hp.hparams(dict(hparams), trial_id=run_name)
        tf.summary.text("run", tf.constant(", ".join(f"{k}={v}" for k, v in hparams.items())), step=0)
    writer.flush()
    writer.close()


def _write_scalars(log_dir: str, scalars: Mapping[str, float], step: int) -> None:
    """``scalars`` at ``step`` into the run's main folder (an event file of their own)."""
    if not scalars:
        return
    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default():
        for tag, value in scalars.items():
            tf.summary.scalar(tag, float(value), step=step)
    writer.flush()
    writer.close()


def _write_plan(log_dir: str, plan: Any) -> None:
    """The plan beside the run (``plan.json``; an adaptive run's: the last plan's)."""
    from tfdist.plan import plan_json

    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(log_dir, "plan.json"), "w") as out:
        out.write(plan_json(plan))


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=None)
def _hparams_tensorboard(flavour: str) -> type:
    """Keras' TensorBoard of ``flavour`` (tf-keras or Keras 3) plus the run's record: hparams at the
    start of training, time-to-target, summary and evaluation scalars in the run's main folder."""
    base = keras_compat.keras_module(flavour).callbacks.TensorBoard

    def __init__(self, log_dir: str, run_name: str, hparams: Mapping[str, Any],
                 targets: Mapping[str, tuple[str, str, float]] | None = None, plan: Any = None,
                 **kwargs: Any) -> None:
        base.__init__(self, log_dir=log_dir, **kwargs)
        self.run_name = run_name
        self.plan = plan
        self.hparams = dict(hparams)
        self.targets = dict(targets or {})
        self.reached: dict[str, float] = {}
        self._train_start: float | None = None
        self._training = False
        self._epochs = 0
        self._wall: float | None = None
        self._predicted = False

    def on_train_begin(self, logs=None) -> None:
        if self._train_start is None:  # one clock per run: an elastic fit calls fit per epoch
            self._train_start = time.perf_counter()
        self._training = True
        base.on_train_begin(self, logs)
        _write_hparams(self.log_dir, self.run_name,
                       with_learning_rate(self.hparams, trained_learning_rate(self.model)))
        if self.plan is not None:
            _write_plan(self.log_dir, self.plan)

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        base.on_epoch_begin(self, epoch, logs)
        if self.plan is not None and not self._predicted:  # at the first epoch this plan trains
            from tfdist.plan import predicted_record

            self._predicted = True
            _write_scalars(self.log_dir, predicted_record(self.plan), step=epoch)

    def plan_changed(self, plan: Any) -> None:
        """An adaptive run took ``plan`` in this process: its segment starts at the next epoch."""
        self.plan, self._predicted = plan, False

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        logs = logs if logs is not None else {}
        if "wall_time_s" not in logs and self._train_start is not None:
            logs["wall_time_s"] = time.perf_counter() - self._train_start
        self._epochs, self._wall = epoch + 1, _number(logs.get("wall_time_s"))
        base.on_epoch_end(self, epoch, logs)
        newly: dict[str, float] = {}
        for tag, (metric, op, threshold) in self.targets.items():
            value = _number(logs.get(metric))
            if tag in self.reached or value is None:
                continue
            if (value >= threshold) if op == AT_LEAST else (value <= threshold):
                self.reached[tag] = newly[f"time_to_target/{tag}"] = float(logs["wall_time_s"])
                newly[f"target_reached/{tag}"] = 1.0
        rate = _number(logs.get("examples_per_second"))
        if self.plan is not None and rate is not None and rate > 0:
            from tfdist.plan import compare

            newly.update(compare(self.plan, rate))
        _write_scalars(self.log_dir, newly, step=epoch + 1)

    def on_train_end(self, logs=None) -> None:
        base.on_train_end(self, logs)
        self._training = False
        logs = logs or {}
        record = {f"{kind}/{tag}": value for tag in self.targets if tag not in self.reached
                  for kind, value in (("time_to_target", math.nan), ("target_reached", 0.0))}
        if self._wall is not None:
            record["train_time_s"] = self._wall
        record.update({key: float(value) for key, value in logs.items()
                       if key.startswith("mean_") and _number(value) is not None})
        _write_scalars(self.log_dir, record, step=max(self._epochs, 1))

    def on_test_end(self, logs=None) -> None:
        base.on_test_end(self, logs)
        if not self._training and logs:  # an evaluate() after fit, not fit's validation
            self.record_evaluation(logs)

    def record_evaluation(self, results: Mapping[str, Any]) -> None:
        _write_scalars(self.log_dir, {f"evaluate/{name}": value for name, value in results.items()
                                      if _number(value) is not None}, step=max(self._epochs, 1))

    return type("HParamsTensorBoard", (base,), {
        "__init__": __init__, "on_train_begin": on_train_begin, "on_epoch_begin": on_epoch_begin,
        "on_epoch_end": on_epoch_end, "plan_changed": plan_changed,
        "on_train_end": on_train_end, "on_test_end": on_test_end, "record_evaluation": record_evaluation,
        "__module__": __name__})


class TensorBoardRun(ChiefOnly):
    """Chief-only TensorBoard writing to ``<logdir>/<run_name>/`` with the run's set-up as hparams.

    ``strategy`` (a tfdist strategy; default: the one ``make_strategy`` built) supplies the
    strategy name and worker count; ``batch_size`` is per worker. Extra ``hparams`` are added to
    the record. ``targets`` (``{"val_accuracy": 0.95}``, ``{"val_loss": ("<=", 0.1)}``) record the
    wall time at which each metric first met its threshold (``>=``, or ``<=`` for names with
    ``loss``); see the module docstring for the tags. ``evaluate`` results join the record when
    this callback is in evaluate's callbacks, or through ``record_evaluation(results)``. Other
    keyword arguments go to Keras' ``TensorBoard`` callback (``histogram_freq``, ...): tf-keras' or
    Keras 3's, whichever the model is.
    """

    def __init__(self, logdir: str, run_name: str | None = None, *, strategy: Any = None,
                 batch_size: int | None = None, hparams: Mapping[str, Any] | None = None,
                 targets: Mapping[str, Any] | None = None,
                 is_chief: bool | None = None, **tensorboard_kwargs: Any) -> None:
        strategy = strategy if strategy is not None else current_strategy()
        if is_chief is None and strategy is not None:
            is_chief = bool(strategy.is_chief)
        kind = getattr(strategy, "kind", "single")
        workers = int(strategy.num_workers) if strategy is not None else _runtime.workers()
        replicas = int(strategy.num_replicas_in_sync) if strategy is not None else _runtime.replicas()
        self.plan = getattr(strategy, "plan", None)
        adaptive = run_channel.folder_from_env() if self.plan is not None else None
        self.run_name = run_name or default_run_name(kind, workers, batch_size, adaptive)
        self.run_dir = os.path.join(logdir, self.run_name)
        self.targets = parse_targets(targets)
        record: dict[str, Any] = {"strategy": kind, "workers": workers}
        if batch_size:
            record.update(batch_size=int(batch_size), global_batch_size=int(batch_size) * replicas)
        if self.plan is not None:
            record.update(self.plan.hparams())
        record.update(hparams or {})
        self._arguments = (self.run_dir, self.run_name, record, dict(tensorboard_kwargs))
        super().__init__(self._tensorboard(keras_compat.TF_KERAS), is_chief=is_chief)

    def plan_changed(self, plan: Any) -> None:
        """An adaptive run took ``plan`` in this process (see the inner callback's)."""
        self.plan = plan
        self.callback.plan_changed(plan)

    def _tensorboard(self, flavour: str) -> Any:
        run_dir, run_name, record, kwargs = self._arguments
        return _hparams_tensorboard(flavour)(run_dir, run_name, record, self.targets, self.plan, **kwargs)

    def set_model(self, model) -> None:
        """Write with the TensorBoard callback of the model's Keras (tf-keras or Keras 3)."""
        flavour = keras_compat.flavour_of(model) or keras_compat.TF_KERAS
        if not isinstance(self.callback, _hparams_tensorboard(flavour)):
            self.callback = self._tensorboard(flavour)
        super().set_model(model)

    @property
    def reached(self) -> dict[str, float]:
        """``{"val_accuracy>=0.95": seconds}`` for the targets reached so far (empty off the chief)."""
        return dict(self.callback.reached)

    def record_evaluation(self, results: Mapping[str, Any]) -> None:
        """Add ``evaluate``'s results (a dict, as ``return_dict=True`` gives) to the run's record as
        ``evaluate/<metric>``; the chief writes, other processes do nothing."""
        if not isinstance(results, Mapping):
            raise ArgumentTypeError(with_fix(
                f"`results` must be a dict of metric name to value, got {type(results).__name__}",
                "call strategy.evaluate(..., return_dict=True), or pass this callback in evaluate's "
                "callbacks"))
        if self.is_chief:
            self.callback.record_evaluation(results)
