"""Elastic Horovod for tf-keras: ``make_strategy("horovod", elastic=True)`` and its ``fit``.

Horovod's elastic mode lets hosts leave and join a running job. Its own Keras callbacks
(``horovod.tensorflow.keras.elastic``) import Keras 3 and do not mix with tf-keras objects, so
``fit`` here is built on ``horovod.tensorflow.elastic`` directly:

* The state (``TensorFlowKerasState``) holds the model's and the optimizer's variables and, as
  plain values: ``epoch`` and ``batch`` (where training stands), ``steps`` (batches per epoch at
  the size the batch was counted at), ``lr_per_replica`` (the learning rate divided by the size
  it was scaled for), ``history`` (the committed epochs' logs) and ``sizes`` (how many ranks ran
  each committed epoch).
* ``CommitState`` (a tf-keras callback, last in the list) commits at every epoch end, and every
  ``commit_every_batches`` batches when asked. A commit copies the state to host memory, then
  asks every rank whether the driver reported a change of hosts (``HostsUpdatedInterrupt``).
* ``horovod.tensorflow.elastic.run`` runs one *attempt* and starts another after a reset: a rank
  lost mid-step (``HorovodInternalError``: the last commit is restored) or hosts added/removed
  (at a commit: nothing to undo). Horovod then re-initialises with the new size and rank 0's
  state is broadcast to every rank, the new ones included.
* Each attempt rescales the learning rate to the new size (when ``strategy.optimizer()`` scaled
  it: ``lr_per_replica * size``), re-shards the data for the new rank and size, finishes an epoch
  that a batch-level commit left half done (its remaining share of batches), then runs the
  remaining epochs with ``initial_epoch`` set, so every epoch is committed exactly once.

What a resumed half epoch trains on: the remaining *share of batches*, not necessarily the
examples the first part did not see. Epochs are counted exactly; data is exactly-once only for a
finite, unshuffled input (numpy arrays with ``shuffle=False``, or a dataset that does not
reshuffle): then the rest of the epoch is the tail of the (new) shard. With ``shuffle=True``
(Keras' default for arrays), a reshuffling dataset, a ``Sequence`` or a repeated dataset, it is
as many batches drawn the usual way, so some examples may be seen twice and others not at all in
that epoch. Batch commits also reshard mid-epoch, so only epoch-level commits (the default) keep
each epoch an ordinary pass over the data.

``fit`` returns a ``History`` of the committed epochs (every epoch once), with
``history.params["elastic_sizes"]``: the ranks that ran each epoch.

Launch with ``tfdist launch --backend horovod --elastic --min-np 1 --max-np 2 --hosts h1:1,h2:1
-- python train.py`` (see ``tfdist.launch.elastic``) or ``horovodrun --min-np ... --max-np ...
--host-discovery-script ...`` directly.
"""
from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import tensorflow as tf
import tf_keras

from tfdist.callbacks import LearningRateWarmup
from tfdist.callbacks.learning_rate import learning_rate_value
from tfdist.errors import ArgumentValueError, TfdistError, with_fix
from tfdist.strategies import inputs
from tfdist.strategies.base import close_callbacks

if TYPE_CHECKING:
    from tfdist.strategies.horovod import HorovodStrategy

log = logging.getLogger("tfdist")

#: What a reset-worthy failure of a Horovod op looks like in TensorFlow's error text.
_HOROVOD_OP_MARKERS = ("HorovodAllreduce", "HorovodAllgather", "HorovodBroadcast", "HorovodReducescatter",
                       "HorovodAlltoall", "Horovod has been shut down")


def new_state(model: Any, initial_epoch: int, lr_per_replica: float | None) -> Any:
    """The elastic state of ``model`` (built, compiled) at the start of ``fit``."""
    from horovod.tensorflow.elastic import TensorFlowKerasState

    return TensorFlowKerasState(model, epoch=initial_epoch, batch=0, steps=0, lr_per_replica=lr_per_replica,
                                history={}, sizes=[])


def remaining_batches(done: int, steps_then: int, steps_now: int) -> int:
    """Batches of an epoch left to run at ``steps_now`` batches per epoch, when ``done`` of
    ``steps_then`` had been committed at the size before (the same share of the epoch).

    At least one: a batch commit is never the epoch's last batch, so the epoch is unfinished, and
    it must end in a ``fit`` call that records it (in the History and the committed state)."""
    if done <= 0 or steps_then <= 0:
        return steps_now
    return max(1, steps_now - round(done * steps_now / steps_then))


def steps_per_epoch(x: Any, kwargs: dict) -> int:
    """Batches per epoch of prepared ``fit`` inputs, which a batch-level commit needs to know."""
    if kwargs.get("steps_per_epoch"):
        return int(kwargs["steps_per_epoch"])
    if inputs.is_dataset(x):
        cardinality = int(x.cardinality().numpy())
        if cardinality > 0:
            return cardinality
    elif isinstance(x, tf_keras.utils.Sequence):
        return len(x)
    elif x is not None and inputs.is_array_input(x):
        return math.ceil(inputs.num_examples(x) / int(kwargs.get("batch_size") or inputs.DEFAULT_BATCH_SIZE))
    raise inputs.InputError(with_fix(
        "commit_every_batches resumes an epoch part-way, which needs the number of batches per epoch, "
        f"and it is not known for this {type(x).__name__}",
        "pass `steps_per_epoch`, or give a dataset of known cardinality or numpy arrays"))


def _remainder(x: Any, y: Any, kwargs: dict, done: int, left: int) -> tuple[Any, Any, dict]:
    """``fit`` arguments for the remaining ``left`` batches of an epoch whose first ``done`` ran.

    Finite inputs without ``steps_per_epoch`` skip the first ``done`` batches of this shard (the
    unseen ones only if the input is not shuffled: see the module docstring); other inputs run
    their next ``left`` batches."""
    kwargs = dict(kwargs)
    if inputs.is_dataset(x) and not kwargs.get("steps_per_epoch"):
        return x.skip(done), y, kwargs  # finite and batched: the epoch's last `left` batches
    if x is not None and not inputs.is_dataset(x) and inputs.is_array_input(x) and not kwargs.get("steps_per_epoch"):
        start = done * int(kwargs.get("batch_size") or inputs.DEFAULT_BATCH_SIZE)

        def cut(structure: Any) -> Any:
            return None if structure is None else tf.nest.map_structure(lambda a: a[start:], structure)

        if kwargs.get("sample_weight") is not None:
            kwargs["sample_weight"] = cut(kwargs["sample_weight"])
        return cut(x), cut(y), kwargs
    kwargs["steps_per_epoch"] = left  # a repeated dataset or a Sequence: its next `left` batches
    return x, y, kwargs


class CommitState(tf_keras.callbacks.Callback):
    """Commit the elastic state at each epoch end (and every ``every_batches`` batches).

    Put it last, after the callbacks that average or rewrite the epoch logs: the committed
    ``history`` holds what they left. ``batch_offset`` is the number of batches of the current
    epoch that ran before this ``fit`` call (a resumed half epoch).
    """

    def __init__(self, state: Any, size: int, steps: int, every_batches: int = 0,
                 warmup: Any = None) -> None:
        super().__init__()
        self.state = state
        self.size = size
        self.steps = steps
        self.warmup = warmup
        self.batch_offset = 0
        self.every_batches = every_batches
        self._seen = 0
        if every_batches:  # Keras calls batch hooks only on callbacks that define them
            self.on_train_batch_end = self._batch_end

    def _batch_end(self, batch: int, logs=None) -> None:
        self._seen += 1
        position = self.batch_offset + batch + 1
        if self._seen % self.every_batches == 0 and position < self.steps:
            self.state.batch, self.state.steps = position, self.steps
            self.state.commit()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        state = self.state
        history = {name: list(values) for name, values in state.history.items()}  # new objects: the
        for name, value in (logs or {}).items():                                   # saved copy keeps
            if isinstance(value, (int, float)) or getattr(value, "shape", None) == ():  # the old ones
                history.setdefault(name, []).append(float(value))
        state.history = history
        state.sizes = [*state.sizes, self.size]
        state.epoch, state.batch, state.steps = epoch + 1, 0, self.steps
        if state.lr_per_replica is not None:
            state.lr_per_replica = self._target_rate(epoch) / self.size
        self.batch_offset = 0
        state.commit()

    def _target_rate(self, epoch: int) -> float:
        """The rate training runs at after any warm-up: the warm-up's target while it ramps."""
        warmup = self.warmup
        if warmup is not None and warmup.target_lr is not None and epoch < math.ceil(warmup.warmup_epochs):
            return float(warmup.target_lr)
        return learning_rate_value(self.model.optimizer)


def elastic_fit(strategy: HorovodStrategy, model: Any, x: Any, y: Any, fit_kwargs: dict) -> Any:
    """``strategy.fit`` with ``elastic=True``: see the module docstring."""
    import horovod.tensorflow.elastic as hvd_elastic

    kwargs = dict(fit_kwargs)
    callbacks = list(kwargs.pop("callbacks", None) or [])
    _refuse_backup(callbacks)
    epochs = int(kwargs.pop("epochs", 1))
    initial_epoch = int(kwargs.pop("initial_epoch", 0))
    strategy.check_fit(model, callbacks)
    first_x, _, _ = strategy.fit_inputs(x, y, dict(kwargs))
    strategy.build_from_first_batch(model, first_x)
    optimizer = model.optimizer
    scaled_for = strategy.scaled_for(optimizer) if strategy.options.scale_lr else None
    rate = learning_rate_value(optimizer)
    state = new_state(model, initial_epoch, rate / scaled_for if scaled_for else None)
    every = strategy.options.commit_every_batches
    last: dict = {}

    def attempt(state: Any) -> None:
        size = strategy.size
        log.info("tfdist elastic: rank %d of %d, training from epoch %d (batch %d)", strategy.rank, size,
                 state.epoch, state.batch)
        if state.lr_per_replica is not None:
            optimizer.learning_rate = state.lr_per_replica * size
        run_x, run_y, run_kwargs = strategy.fit_inputs(x, y, dict(kwargs), model)
        steps = steps_per_epoch(run_x, run_kwargs) if every else 0
        ours = strategy.fit_callbacks(list(callbacks), run_kwargs)
        warmups = [cb for cb in ours if isinstance(cb, LearningRateWarmup)]
        for warmup in warmups:  # re-read the (rescaled) rate as the warm-up's target
            warmup.target_lr = None
        commit = CommitState(state, size, steps, every, warmups[0] if warmups else None)
        run_kwargs["callbacks"] = [*ours, commit]
        if not strategy.is_chief:
            run_kwargs["verbose"] = 0
        try:  # a reset (a host gone or added) raises out of fit: the next attempt instruments afresh
            if state.batch and state.epoch < epochs:
                left = remaining_batches(state.batch, state.steps, steps)
                done = steps - left
                part_x, part_y, part_kwargs = _remainder(run_x, run_y, run_kwargs, done, left)
                commit.batch_offset = done
                last["history"] = model.fit(part_x, part_y, initial_epoch=state.epoch, epochs=state.epoch + 1,
                                            **part_kwargs)
            if state.epoch < epochs:
                last["history"] = model.fit(run_x, run_y, initial_epoch=state.epoch, epochs=epochs, **run_kwargs)
        finally:
            close_callbacks(run_kwargs["callbacks"])

    _run_elastic(hvd_elastic, attempt, state, epochs)
    return _history(model, state, initial_epoch, last.get("history"))


class ElasticFitError(TfdistError, RuntimeError):
    """An elastic ``fit`` that failed in a way Horovod's elastic loop does not recover from."""


def _run_elastic(hvd_elastic: Any, attempt: Any, state: Any, epochs: int) -> None:
    """``hvd_elastic.run(attempt)(state)``, then a check that every epoch was committed.

    Horovod's ``run`` wrapper catches every ``tf.errors.UnknownError``: those of its allreduce,
    allgather and broadcast become a reset, and *any other* is swallowed (``run`` returns None
    as if training had finished). So here a failed Horovod op of any error type (e.g. an eager
    allreduce in a callback) becomes the ``HorovodInternalError`` that makes Horovod restore and
    reset, and every other ``UnknownError`` becomes an ``ElasticFitError`` that Horovod passes on.
    Should ``run`` still return early, the epoch check turns the silent success into an error.
    """
    from horovod.common.exceptions import HorovodInternalError

    def guarded(state: Any) -> Any:
        try:
            return attempt(state)
        except tf.errors.OpError as error:
            if any(marker in (error.message or "") for marker in _HOROVOD_OP_MARKERS):
                raise HorovodInternalError(error) from error
            if isinstance(error, tf.errors.UnknownError):  # Horovod's wrapper would swallow it
                raise ElasticFitError(with_fix(
                    f"elastic fit failed at epoch {state.epoch} with {type(error).__name__}: {error.message}",
                    "fix the error above (it is not a lost rank, so the elastic loop cannot recover from "
                    "it); the last committed state is lost with this process")) from error
            raise

    hvd_elastic.run(guarded)(state)
    if state.epoch < epochs:
        raise ElasticFitError(with_fix(
            f"elastic fit returned after {state.epoch} of {epochs} epochs (Horovod's elastic loop ended "
            "without an error reaching tfdist)",
            "look for an earlier error in this rank's output; rerun the job"))


def _history(model: Any, state: Any, initial_epoch: int, last: Any) -> Any:
    """A History of every committed epoch, once each, whatever attempts ran them."""
    history = tf_keras.callbacks.History()
    history.set_model(model)
    history.history = {name: list(values) for name, values in state.history.items()}
    history.epoch = list(range(initial_epoch, initial_epoch + len(state.sizes)))
    history.set_params({**(getattr(last, "params", None) or {}), "elastic_sizes": list(state.sizes)})
    return history


def _refuse_backup(callbacks: list) -> None:
    """BackupAndRestore would restore a file over the state Horovod just synchronised."""
    for callback in callbacks:
        if isinstance(getattr(callback, "callback", callback), tf_keras.callbacks.BackupAndRestore):
            raise ArgumentValueError(with_fix(
                "BackupAndRestore with elastic=True: after every host change the elastic state is restored "
                "and broadcast from memory, and BackupAndRestore would then load its file over it",
                "drop BackupAndRestore (the elastic state survives lost ranks; keep a ModelCheckpoint for "
                "the loss of the whole job), or use elastic=False"))
