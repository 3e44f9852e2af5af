"""``strategy.fit`` of a Keras 3 model under parameter servers, run on tfdist's custom-loop machinery.

Keras 3 dropped parameter-server training (keras-team/keras#18624): its TensorFlow trainer
(keras/src/backend/tensorflow/trainer.py) runs each step on the process that calls ``fit`` and never
schedules one through a ``ClusterCoordinator``. tfdist's loop does (``strategy.setup``, ``distribute``,
``function``, ``minimize``, ``reduce``), so ``fit`` here is that loop, driven for the user:

* the data is an unbatched ``tf.data.Dataset`` or arrays, with ``batch_size`` (per worker): each worker
  rebuilds the pipeline and reads its shard of the repeated stream (``strategy.distribute``);
* a step is the model's forward pass, ``model.compute_loss`` (compiled loss and regularisation) and the
  optimizer's update on the ps (``strategy.minimize``), scheduled on whichever worker is free;
* the compiled metrics are computed without state on the workers (``Metric.stateless_update_state`` from
  zeros, each step on its own batch) and their states summed on the coordinator at the epoch's end
  (``stateless_result``): exact for metrics whose state is a sum from zero (means, accuracies, counts,
  confusion matrices, AUC's buckets), and a metric whose reset state is not zero is refused;
* ``validation_data`` and ``strategy.evaluate`` run on the coordinator (the chief), which reads the
  variables from the ps: every example once, exactly, in Keras' order of logs (``val_`` in ``fit``);
* the callbacks get epoch-level calls only, with the epoch's mean loss and the metrics (a progress bar
  prints one line an epoch, as ``verbose=2``): a callback
  with batch hooks is refused (it would never be called), as are ``BackupAndRestore`` (use
  ``strategy.checkpoint`` in a loop) and any ``fit`` argument this loop does not honour.

Each variable lives whole on one ps task (sharding is refused: ``loop.PS_KERAS_3_SHARDS_REASON``), and
the optimizer must come from ``strategy.optimizer``, which makes it count its steps atomically.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import tensorflow as tf

from tfdist import keras_compat, upstream
from tfdist.errors import ArgumentValueError, with_fix
from tfdist.strategies import inputs, loop

log = logging.getLogger("tfdist")

#: The ``fit`` arguments this loop honours; any other is refused by name.
FIT_ARGUMENTS = frozenset({"batch_size", "epochs", "initial_epoch", "steps_per_epoch", "callbacks", "verbose",
                           "shuffle", "validation_data", "validation_steps"})
#: The ``evaluate`` arguments this module honours.
EVALUATE_ARGUMENTS = frozenset({"batch_size", "steps", "verbose", "return_dict"})
#: Keras 3 callback methods that only a trainer calling every batch would reach.
BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")
_LOOP = "docs/custom-loops.md"


def fit_inputs(x: Any, y: Any, kwargs: dict) -> tuple[Any, dict]:
    """``(unbatched dataset, kwargs)`` for :func:`run_fit`: arrays become a dataset (shuffled each epoch
    unless ``shuffle=False``); a dataset must come unbatched, with ``batch_size``. Refuses by name any
    argument the loop does not honour."""
    _refuse_unknown(kwargs, FIT_ARGUMENTS, "strategy.fit")
    if callable(x) and not inputs.is_dataset(x):  # a dataset_fn, or tf-keras' DatasetCreator
        raise ArgumentValueError(with_fix(
            "strategy.fit of a Keras 3 model under parameter servers takes an unbatched tf.data.Dataset or "
            f"arrays, not a dataset function ({type(x).__name__})",
            "pass the dataset the function returns, unbatched, with batch_size= (each worker reads its shard)"))
    if kwargs.get("batch_size") is None:
        if inputs.is_dataset(x):
            raise ArgumentValueError(with_fix(
                "strategy.fit of a Keras 3 model under parameter servers needs batch_size= with a dataset "
                "(each worker batches its own shard of the unbatched examples)",
                "pass the dataset unbatched, and batch_size=N (per worker)"))
        kwargs["batch_size"] = inputs.DEFAULT_BATCH_SIZE
    if inputs.is_dataset(x):
        if y is not None:
            raise ArgumentValueError(with_fix("`y` was given with a dataset `x`",
                                              "put the labels in the dataset's elements, (x, y)"))
        return x, kwargs
    arrays = (x,) if y is None else (x, y)
    examples = inputs.num_examples(arrays)
    elements = arrays if y is not None else x
    dataset = tf.data.Dataset.from_tensor_slices(elements)
    if kwargs.pop("shuffle", True):
        dataset = epoch_shuffled(elements, examples)
        if kwargs.get("steps_per_epoch") is None:  # the shuffled stream is endless
            kwargs["steps_per_epoch"] = loop.steps_per_epoch(examples, int(kwargs["batch_size"]), 1, None)
    return dataset, kwargs


def epoch_shuffled(elements: Any, examples: int) -> Any:
    """The examples of ``elements`` (arrays, or a tuple of them) repeated, each epoch in another order
    that every worker's rebuilt copy of the pipeline repeats: a permutation drawn statelessly from a seed
    and the epoch's number. (A shuffle that reshuffles each epoch draws its seeds from a generator that the
    per-worker graph does not carry: each worker drew its own order, and their shards overlapped: with
    two workers about a quarter of the examples an epoch were trained on by neither.)"""
    seed = int(np.random.default_rng().integers(2**31))  # drawn once, on the coordinator, into the graph
    tensors = tf.nest.map_structure(tf.convert_to_tensor, elements)

    def one_epoch(epoch: Any) -> Any:
        order = tf.random.experimental.stateless_shuffle(tf.range(examples, dtype=tf.int64),
                                                         seed=tf.stack([tf.constant(seed, tf.int64), epoch]))
        return tf.data.Dataset.from_tensor_slices(order)

    return tf.data.Dataset.range(2**62).flat_map(one_epoch).map(
        lambda index: tf.nest.map_structure(lambda tensor: tf.gather(tensor, index), tensors))


def _refuse_unknown(kwargs: dict, known: frozenset[str], call: str) -> None:
    unknown = sorted(name for name, value in kwargs.items() if name not in known and value is not None)
    if unknown:
        raise ArgumentValueError(with_fix(
            f"{call} of a Keras 3 model under parameter servers does not take {', '.join(unknown)}",
            f"drop it, or write the loop yourself ({_LOOP}); or build the model with tf-keras, whose {call} "
            "takes it"))


def evaluation_batches(data: Any, batch_size: int | None, steps: int | None) -> Any:
    """``data`` (arrays, a tuple of them, or a dataset: unbatched when ``batch_size`` is given, else
    batched) as the finite batched dataset the coordinator evaluates, ``steps`` batches of it if given."""
    if inputs.is_dataset(data):
        dataset = data.batch(int(batch_size)) if batch_size is not None else data
    else:
        dataset = tf.data.Dataset.from_tensor_slices(tuple(data) if isinstance(data, list) else data)
        dataset = dataset.batch(int(batch_size or inputs.DEFAULT_BATCH_SIZE))
    if steps is not None:
        return dataset.take(int(steps))
    if int(dataset.cardinality().numpy()) < 0:
        raise ArgumentValueError(with_fix("the evaluation data has an unknown or infinite length",
                                          "pass `validation_steps=` (in fit) or `steps=` (in evaluate)"))
    return dataset


def run_evaluate(model: Any, x: Any, y: Any, kwargs: dict) -> Any:
    """``evaluate`` of a Keras 3 ``model`` whose variables live on the ps, run on this process (the
    coordinator): the loss and compiled metrics over every example once; a dict with
    ``return_dict=True``, else Keras' list (or the loss alone)."""
    _refuse_unknown(kwargs, EVALUATE_ARGUMENTS, "strategy.evaluate")
    data = x if y is None else (x, y)
    batches = evaluation_batches(data, kwargs.get("batch_size"), kwargs.get("steps"))
    logs = Evaluation(model, batches).run()
    if kwargs.get("return_dict"):
        return logs
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


def run_fit(strategy: Any, model: Any, dataset: Any, kwargs: dict) -> Any:
    """Train ``model`` as ``fit(dataset, **kwargs)`` would (see the module docstring); the History."""
    import keras

    epochs, initial_epoch = int(kwargs.get("epochs") or 1), int(kwargs.get("initial_epoch") or 0)
    callbacks = list(kwargs.get("callbacks") or [])
    _check_callbacks(callbacks)
    steps_per_execution = max(int(getattr(model, "steps_per_execution", 1) or 1),
                              int(strategy.options.steps_per_execution or 1))
    if steps_per_execution > 1:
        log.warning("tfdist: steps_per_execution=%d does not apply to a Keras 3 model under parameter servers: "
                    "tfdist's loop schedules one step at a time", steps_per_execution)
    strategy.setup(model, model.optimizer)
    data = strategy.distribute(dataset, int(kwargs["batch_size"]), kwargs.get("steps_per_epoch"))
    metrics = StatelessMetrics(model, next(iter(dataset.batch(int(kwargs["batch_size"])).take(1))))
    validation = None
    if kwargs.get("validation_data") is not None:
        batches = evaluation_batches(kwargs["validation_data"], kwargs["batch_size"],  # unbatched, as x
                                     kwargs.get("validation_steps"))
        validation = Evaluation(model, batches, metrics)  # the training's metrics, built once

    @strategy.function
    def train_step(batch: Any) -> dict:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
        strategy.minimize(tape, loss)
        return {"loss": loss, **metrics.step_states(x, y, y_pred, sample_weight)}

    history = keras.callbacks.History()
    verbose = kwargs.get("verbose", "auto")
    verbose = 2 if verbose == "auto" else int(verbose)  # one line an epoch: no bar moves between them
    listed = keras.callbacks.CallbackList([*callbacks, history], add_history=False, add_progbar=verbose != 0,
                                          model=model, epochs=epochs, steps=data.steps_per_epoch, verbose=verbose)
    iterator = iter(data)
    model.stop_training = False
    listed.on_train_begin()
    for epoch in range(initial_epoch, epochs):
        listed.on_epoch_begin(epoch)
        outputs = strategy.reduce("sum", [train_step(iterator) for _ in range(data.steps_per_epoch)])
        logs = {"loss": float(outputs.pop("loss")), **metrics.results(outputs, data.steps_per_epoch)}
        if validation is not None:  # the clocks of Throughput and its kind stop for it, as in Keras' fit
            listed.on_test_begin()
            validated = validation.run()
            listed.on_test_end(validated)
            logs.update({f"val_{key}": value for key, value in validated.items()})
        listed.on_epoch_end(epoch, logs)
        if model.stop_training:
            break
    listed.on_train_end()
    model.history = history
    return history


def _check_callbacks(callbacks: list) -> None:
    """Refuse the callbacks this loop would not serve: Keras 3 batch hooks and ``BackupAndRestore``."""
    import keras

    for index, callback in enumerate(callbacks):
        if keras_compat.is_keras(callback, "callbacks.ProgbarLogger"):
            continue  # a progress bar: its line is printed at each epoch's end
        if keras_compat.flavour_of(callback) != keras_compat.KERAS_3:  # tfdist's own, tf-keras callbacks
            if upstream.has_batch_hooks(callback):
                raise ArgumentValueError(with_fix(
                    f"callbacks[{index}] ({type(callback).__name__}) has batch hooks, and strategy.fit of a "
                    "Keras 3 model under parameter servers calls callbacks once an epoch",
                    "use epoch-level callbacks, or a custom loop that calls it every step"))
            continue
        if keras_compat.has_class_named(callback, "BackupAndRestore"):
            raise ArgumentValueError(with_fix(
                f"callbacks[{index}] is Keras 3's BackupAndRestore, which restores through Keras 3's own fit "
                "and cannot here", f"checkpoint a custom loop with strategy.checkpoint ({_LOOP}), or build "
                "the model with tf-keras, whose fit under parameter servers takes BackupAndRestore"))
        if keras_compat.has_class_named(callback, "ModelCheckpoint") and getattr(callback, "save_freq", None) == "epoch":
            continue  # its batch hooks save only every save_freq batches
        hooked = [name for name in BATCH_HOOKS if name in vars(callback)  # LambdaCallback(on_batch_end=...)
                  or getattr(type(callback), name, None) is not getattr(keras.callbacks.Callback, name)]
        if hooked:
            raise ArgumentValueError(with_fix(
                f"callbacks[{index}] ({type(callback).__name__}) has batch hooks ({', '.join(hooked)}), and "
                "strategy.fit of a Keras 3 model under parameter servers calls callbacks once an epoch",
                "use epoch-level callbacks (tfdist.callbacks.TensorBoardRun in place of keras.callbacks.TensorBoard, "
            "ModelCheckpoint with save_freq='epoch', tfdist.callbacks.Throughput)"))


class StatelessMetrics:
    """The model's compiled metrics, computed without state on the workers: each step returns the
    metrics' state updated from zeros by its own batch; the epoch sums them and asks the metrics for
    their result. The metrics are built on the coordinator from one local ``batch``."""

    def __init__(self, model: Any, batch: Any) -> None:
        import keras

        self.metrics = [m for m in model.metrics if m.name != "loss"]  # the loss is the step's own
        self.specs: list = []
        others = [m.name for m in self.metrics if type(m).__name__ != "CompileMetrics"]
        if others:
            raise ArgumentValueError(with_fix(
                f"strategy.fit of a Keras 3 model under parameter servers computes the compiled metrics only, "
                f"and this model also tracks {', '.join(others)} (per-output losses, or metrics of its layers)",
                f"train it in a custom loop that returns them from the step ({_LOOP})"))
        if not self.metrics:
            return
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
        model.compute_metrics(x, y, model(x, training=False), sample_weight)  # builds them locally
        for metric in self.metrics:
            metric.reset_state()
            nonzero = [v.path for v in metric.variables if np.any(np.asarray(v.numpy()) != 0)]
            if nonzero:
                raise ArgumentValueError(with_fix(
                    f"the compiled metric {metric.name!r} starts from a state that is not zero ({nonzero[0]}), "
                    "so its workers' steps cannot be summed", f"compute it in a custom loop ({_LOOP}), or "
                    "compile without it and evaluate a copy of the model after fit (strategy.export)"))
        self.specs = [[(tuple(v.shape), v.dtype) for v in metric.variables] for metric in self.metrics]

    def step_states(self, x: Any, y: Any, y_pred: Any, sample_weight: Any) -> dict:
        """This step's metric states, from zeros (inside the scheduled step)."""
        found = {}
        for index, (metric, specs) in enumerate(zip(self.metrics, self.specs)):
            zeros = [tf.zeros(shape, dtype) for shape, dtype in specs]
            states = metric.stateless_update_state(zeros, y, y_pred, sample_weight)
            found.update({f"metric_{index}_{n}": tf.cast(s, tf.float64) for n, s in enumerate(states)})
        return found

    def results(self, outputs: dict, steps: int) -> dict[str, float]:
        """The epoch's metric values from ``outputs`` (the mean over ``steps`` steps of each state; with
        ``steps=1``, their sum)."""
        logs: dict[str, float] = {}
        for index, (metric, specs) in enumerate(zip(self.metrics, self.specs)):
            states = [tf.constant(_as_state(np.asarray(outputs[f"metric_{index}_{n}"]) * steps, dtype), dtype)
                      for n, (_, dtype) in enumerate(specs)]
            result = metric.stateless_result(states)
            named = result if isinstance(result, dict) else {metric.name: result}
            logs.update({key: float(value) for key, value in named.items()})
        return logs


def _as_state(total: np.ndarray, dtype: Any) -> np.ndarray:
    """A summed metric state back in its dtype's values: counts are integers (the float mean over the
    steps times their number is off by rounding)."""
    return np.rint(total) if tf.as_dtype(dtype).is_integer else total


class Evaluation:
    """The loss and compiled metrics of ``model`` over finite ``batches``, computed on this process (the
    coordinator reads the variables from the ps): each batch in one traced function, the loss averaged
    over the examples as Keras' evaluate does, the metrics' states summed. ``metrics``: the model's
    :class:`StatelessMetrics` when already built (fit's), else built here from the first batch."""

    def __init__(self, model: Any, batches: Any, metrics: StatelessMetrics | None = None) -> None:
        import keras

        self.batches = batches
        self.metrics = metrics if metrics is not None else StatelessMetrics(model, next(iter(batches)))

        @tf.function
        def test_step(batch: Any) -> dict:
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
            y_pred = model(x, training=False)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False)
            examples = tf.cast(tf.shape(tf.nest.flatten(x)[0])[0], tf.float64)
            return {"loss": tf.cast(loss, tf.float64) * examples, "examples": examples,
                    **self.metrics.step_states(x, y, y_pred, sample_weight)}

        self.test_step = test_step

    def run(self) -> dict[str, float]:
        totals: dict[str, Any] = {}
        for batch in self.batches:
            for key, value in self.test_step(batch).items():
                totals[key] = totals.get(key, 0.0) + np.asarray(value)
        if not totals:
            raise ArgumentValueError(with_fix("the evaluation data holds no batch", "pass at least one example"))
        loss = float(totals.pop("loss") / totals.pop("examples"))
        return {"loss": loss, **self.metrics.results(totals, 1)}


__all__ = ["EVALUATE_ARGUMENTS", "FIT_ARGUMENTS", "Evaluation", "StatelessMetrics", "evaluation_batches",
           "fit_inputs", "run_evaluate", "run_fit"]
