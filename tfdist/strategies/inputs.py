"""Every backend's input handling in one place: what ``fit``/``evaluate`` data becomes per backend.

The rules, the same on every backend:

* ``batch_size`` is per replica (default 32 for arrays). tf.distribute splits a *global* batch over
  its replicas, so for those backends it is multiplied by the replica count.
* A ``tf.data.Dataset`` passed *with* ``batch_size`` holds single examples and is batched here; one
  passed without it is already batched.
* ``shard_data`` (Horovod, multi-worker mirrored, parameter server): each worker reads its own part
  of the data. Off when the input pipeline already splits by worker. Under parameter servers it
  applies to arrays; a ``tf.data.Dataset`` is iterated by every worker from its own copy (tf-keras'
  rule), and a ``dataset_fn(input_context)`` splits however it likes.

Horovod: every rank must run the same number of steps, or the ranks that finish first leave the
others waiting in an allreduce forever; the helpers therefore cut every shard to the smallest one.
A rank's arrays then become tfdist's own pipeline, with tf.data's autotuning off
(``array_fit_pipeline``): Keras' own can stall ``fit`` for up to a minute as it returns.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from tfdist import upstream
from tfdist.errors import TfdistError, with_fix

DEFAULT_BATCH_SIZE = 32  # Keras' default, per replica here
log = logging.getLogger("tfdist")


class InputError(TfdistError, ValueError):
    """The training data cannot be used as given; the message says what to pass."""


def is_dataset(value: Any) -> bool:
    return isinstance(value, tf.data.Dataset)


def is_array_input(x: Any) -> bool:
    """numpy arrays, tensors, or lists/dicts of them: what Keras batches with ``batch_size``."""
    leaves = tf.nest.flatten(x)
    return bool(leaves) and all(isinstance(leaf, (np.ndarray, tf.Tensor)) for leaf in leaves)


def num_examples(structure: Any) -> int:
    """The shared first dimension of a (nested) structure of arrays."""
    lengths = {len(leaf) for leaf in tf.nest.flatten(structure) if leaf is not None}
    if len(lengths) != 1:
        raise InputError(with_fix(f"the input arrays have different numbers of examples: {sorted(lengths)}",
                                  "pass x, y and sample_weight with the same first dimension"))
    return lengths.pop()


def _steps_key_hint(argument: str) -> str:
    return {"x": "steps_per_epoch", "validation_data": "validation_steps"}.get(argument, "steps")


# --- every process that shards its own copy (Horovod, multi-worker mirrored) ------------------------
def warn_unseeded_shuffle(data: Any, processes: int, where: str) -> bool:
    """Log one warning, and return True, when ``data`` is a dataset that ``processes`` (more than 1) each
    build and take their shard of (Horovod's ranks, multi-worker mirrored's workers) and one of its
    shuffles has no seed (:func:`tfdist.upstream.unseeded_shuffles`): each process then shuffles in an
    order of its own, and their shards overlap. ``where``: ``fit`` or ``loop``, for the message."""
    if processes < 2 or not is_dataset(data) or not upstream.unseeded_shuffles(data):
        return False
    log.warning("tfdist %s: the dataset is shuffled without a seed, so each of the %d processes shuffles it in an "
                "order of its own and their shards overlap (%s); pass shuffle(..., seed=...), the same seed on every "
                "process, for shards that cover every example once", where, processes, missed_by_all(processes))
    return True


def missed_by_all(processes: int) -> str:
    """What ``processes`` shards, each taken from an order of its own, leave out: an example is in none of
    them with chance (1 - 1/n)^n (a quarter for two)."""
    return (f"shuffled whole, about {100 * (1 - 1 / processes) ** processes:.0f}% of the examples an epoch are "
            "trained on by none of them")


# --- Horovod: shard by rank -------------------------------------------------------------------------
def shard_arrays(structure: Any, rank: int, size: int, count: int | None = None) -> Any:
    """Rank ``rank``'s strided share of every array: examples rank, rank+size, ...

    All ranks get exactly ``count`` (default ``len // size``) examples, so their step counts match.
    Striding keeps batch k of all ranks together equal to batch k of one process with a batch
    ``size`` times larger.
    """
    if structure is None:
        return None
    total = num_examples(structure)
    count = total // size if count is None else count
    if count == 0:
        raise InputError(with_fix(f"{total} examples cannot be split over {size} ranks",
                                  "pass at least one example per rank"))
    return tf.nest.map_structure(
        lambda leaf: None if leaf is None else np.asarray(leaf)[rank::size][:count], structure)


def shard_dataset(dataset: tf.data.Dataset, rank: int, size: int, *, steps: int | None,
                  batch_size: int | None, argument: str) -> tuple[tf.data.Dataset, int | None]:
    """Shard ``dataset`` by rank so every rank yields the same number of batches.

    * ``batch_size`` given: the dataset holds single examples; shard, truncate, then batch.
    * ``steps`` given: shard and repeat, so each epoch is exactly ``steps`` batches on every rank.
    * neither: the cardinality must be known; every shard is cut to the smallest one.

    Returns the dataset and the steps per epoch to pass on (``None`` when the dataset's own
    cardinality already says it).
    """
    sharded = dataset.shard(size, rank)
    if steps is not None:
        if batch_size is not None:
            sharded = sharded.batch(batch_size)
        return sharded.repeat(), steps
    cardinality = int(dataset.cardinality().numpy())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise InputError(with_fix(f"`{argument}` is an infinite dataset, so the number of steps is unknown",
                                  f"pass `{_steps_key_hint(argument)}`"))
    if cardinality == tf.data.UNKNOWN_CARDINALITY:
        raise InputError(with_fix(
            f"the cardinality of `{argument}` is unknown (filter/flat_map/generator), so its shards "
            "could give ranks different step counts and hang the job",
            f"pass `{_steps_key_hint(argument)}` or apply "
            "`dataset.apply(tf.data.experimental.assert_cardinality(N))`"))
    per_rank = cardinality // size
    if per_rank == 0:
        raise InputError(with_fix(f"`{argument}` has {cardinality} elements, fewer than the {size} ranks",
                                  "give every rank at least one element"))
    sharded = sharded.take(per_rank)
    if batch_size is not None:
        sharded = sharded.batch(batch_size)
    return sharded, None


def horovod_inputs(x: Any, y: Any, kwargs: dict, rank: int, size: int, *, shard: bool,
                   steps_key: str) -> tuple[Any, Any, dict]:
    """``fit``/``evaluate`` arguments for one Horovod rank: its shard of ``x``/``y``/``sample_weight``.

    ``steps_key`` is ``steps_per_epoch`` for ``fit`` and ``steps`` for ``evaluate``.
    """
    if not shard:
        if is_dataset(x) and kwargs.get("batch_size") is not None:
            x = x.batch(int(kwargs.pop("batch_size")))  # batching is the same rule, sharded or not
        return x, y, kwargs
    if is_dataset(x):
        x, steps = shard_dataset(x, rank, size, steps=kwargs.get(steps_key),
                                 batch_size=kwargs.pop("batch_size", None), argument="x")
        if steps is not None:
            kwargs[steps_key] = steps
        return x, y, kwargs
    if x is None:
        return x, y, kwargs
    arrays = {"x": x, "y": y, "sample_weight": kwargs.get("sample_weight")}
    sharded = shard_arrays({k: v for k, v in arrays.items() if v is not None}, rank, size)
    if "sample_weight" in sharded:
        kwargs["sample_weight"] = sharded["sample_weight"]
    return sharded["x"], sharded.get("y"), kwargs


def horovod_fit_inputs(x: Any, y: Any, kwargs: dict, rank: int, size: int, *,
                       shard: bool) -> tuple[Any, Any, dict]:
    """Shard the training and the validation data of ``fit`` for one Horovod rank."""
    batch_size = kwargs.get("batch_size")
    x_is_dataset = is_dataset(x)
    x, y, kwargs = horovod_inputs(x, y, kwargs, rank, size, shard=shard, steps_key="steps_per_epoch")
    validation = kwargs.get("validation_data")
    if validation is None:
        return x, y, kwargs
    if not shard:
        if is_dataset(validation) and x_is_dataset and batch_size is not None:
            kwargs["validation_data"] = validation.batch(int(batch_size))
        return x, y, kwargs
    if is_dataset(validation):
        validation, steps = shard_dataset(
            validation, rank, size, steps=kwargs.get("validation_steps"),
            batch_size=batch_size if x_is_dataset else None, argument="validation_data")
        if steps is not None:
            kwargs["validation_steps"] = steps
        kwargs["validation_data"] = validation
        return x, y, kwargs
    weights = {"sample_weight": validation[2]} if len(validation) > 2 else {}
    vx, vy, weights = horovod_inputs(validation[0], validation[1] if len(validation) > 1 else None,
                                     weights, rank, size, shard=True, steps_key="validation_steps")
    kwargs["validation_data"] = (vx, vy, *([weights["sample_weight"]] if weights else []))
    return x, y, kwargs


# --- tfdist's own array pipeline ------------------------------------------------------------------
def without_autotune(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` with tf.data's autotuning off, so its iterator starts no ``tf_data_model`` thread.

    Freeing an autotuned iterator joins that thread, and the join can wait out the thread's sleep,
    which doubles up to 60 s as a run goes on: the thread is woken by the cancellation, and can
    check for it before the cancellation is marked done, then sleep again. Lab runs stalled 30-108 s
    as ``fit`` returned, on every backend (``benchmarks/README.md``)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def _plain_arrays(value: Any) -> bool:
    """An array or tensor, or a dict of them: what the array pipeline rebuilds (lists and tuples of
    inputs stay Keras' own, which maps them to a model's inputs by position)."""
    if isinstance(value, dict):
        return bool(value) and all(isinstance(leaf, (np.ndarray, tf.Tensor)) for leaf in value.values())
    return isinstance(value, (np.ndarray, tf.Tensor))


def _as_tensor(leaf: Any, floatx: str) -> tf.Tensor:
    """A numpy array as a tensor, floating ones in ``floatx`` as Keras casts them (tensors as given)."""
    if isinstance(leaf, np.ndarray) and np.issubdtype(leaf.dtype, np.floating):
        return tf.convert_to_tensor(leaf, dtype=floatx)
    return tf.convert_to_tensor(leaf)


def array_batches(arrays: tuple, batch_size: int, *, shuffle: bool, floatx: str = "float32") -> tf.data.Dataset:
    """Batches of ``arrays`` (``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``) as Keras cuts them
    from arrays: floating numpy arrays in ``floatx``, each epoch (each iteration) a new order when
    ``shuffle``, the last batch partial, the next batches gathered ahead (two); autotuning off
    (``without_autotune``)."""
    examples = num_examples(arrays)
    indices = tf.data.Dataset.range(examples)
    if shuffle:
        indices = indices.shuffle(examples, reshuffle_each_iteration=True)
    return _gathered(arrays, indices.batch(batch_size), floatx)


def seeded_epochs(arrays: tuple, batch_size: int, *, seed: int, epochs: range,
                  floatx: str = "float32") -> tf.data.Dataset:
    """The batches of every epoch in ``epochs``, one stream, cut as :func:`array_batches` cuts one
    epoch, each epoch's order drawn from ``(seed, epoch)`` alone: wherever the seed is the same, so
    is every epoch's order, whatever each process's global seed (a stateless shuffle). Iterate it
    once for the whole ``fit`` (``steps_per_epoch`` = :func:`math.ceil` of examples / batch)."""
    examples = num_examples(arrays)

    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        order = tf.random.experimental.stateless_shuffle(tf.range(examples, dtype=tf.int64),
                                                         seed=tf.stack([tf.constant(seed, tf.int64), epoch]))
        return tf.data.Dataset.from_tensor_slices(order).batch(batch_size)

    indices = tf.data.Dataset.range(epochs.start, epochs.stop).flat_map(epoch_batches)
    return _gathered(arrays, indices, floatx)


def _gathered(arrays: tuple, batches_of_indices: tf.data.Dataset, floatx: str) -> tf.data.Dataset:
    """Each batch of indices as the examples of ``arrays`` it names, two batches ahead, autotuning off."""
    tensors = tf.nest.map_structure(lambda leaf: _as_tensor(leaf, floatx), arrays)
    batches = batches_of_indices.map(
        lambda batch: tf.nest.map_structure(lambda tensor: tf.gather(tensor, batch), tensors))
    return without_autotune(batches.prefetch(2))


def takes_array_pipeline(x: Any, y: Any, kwargs: dict) -> bool:
    """Whether :func:`array_fit_pipeline` builds ``fit``'s pipeline from these inputs. Not: anything but
    arrays and dicts of arrays, weights without labels, ``shuffle="batch"``, and ``fit`` calls that use
    what only arrays take (``validation_split``) or that cut epochs by ``steps_per_epoch``."""
    weights = kwargs.get("sample_weight")
    return not (x is None or is_dataset(x) or kwargs.get("validation_split") or kwargs.get("steps_per_epoch")
                or not isinstance(kwargs.get("shuffle", True), bool) or (y is None and weights is not None)
                or not all(_plain_arrays(value) for value in (x, y, weights) if value is not None))


def array_fit_pipeline(x: Any, y: Any, kwargs: dict, *, floatx: str = "float32",
                       seed: int | None = None) -> tuple[Any, Any, dict]:
    """``fit``'s arrays (and validation arrays) as tfdist's own pipeline (``array_batches``, floating
    arrays in the model's ``floatx``), in place of the one Keras builds from them with autotuning on;
    what :func:`takes_array_pipeline` refuses is left to Keras as it is. With ``seed``, a shuffled
    ``fit`` gets :func:`seeded_epochs` and its ``steps_per_epoch``: the same orders wherever the seed
    is the same."""
    if not takes_array_pipeline(x, y, kwargs):
        return x, y, kwargs
    weights = kwargs.get("sample_weight")
    kwargs = dict(kwargs)
    batch_size = int(kwargs.pop("batch_size", None) or DEFAULT_BATCH_SIZE)
    kwargs.pop("sample_weight", None)
    arrays = (x,) if y is None else (x, y) if weights is None else (x, y, weights)
    shuffle = kwargs.pop("shuffle", True)
    if shuffle and seed is not None:
        epochs = range(int(kwargs.get("initial_epoch", 0)), int(kwargs.get("epochs", 1)))
        x = seeded_epochs(arrays, batch_size, seed=seed, epochs=epochs, floatx=floatx)
        kwargs["steps_per_epoch"] = -(-num_examples(arrays) // batch_size)
    else:
        x = array_batches(arrays, batch_size, shuffle=shuffle, floatx=floatx)
    y = None
    validation = kwargs.get("validation_data")
    validation_batch = int(kwargs.pop("validation_batch_size", None) or batch_size)
    if isinstance(validation, tuple) and validation and all(_plain_arrays(value) for value in validation):
        kwargs["validation_data"] = array_batches(validation, validation_batch, shuffle=False, floatx=floatx)
    elif validation is not None and not is_dataset(validation):
        kwargs["validation_batch_size"] = validation_batch  # Keras' default would be 32, not fit's batch
    return x, y, kwargs


# --- tf.distribute (mirrored, multi-worker mirrored): global batches --------------------------------
def _without_auto_shard(dataset: tf.data.Dataset) -> tf.data.Dataset:
    return _with_auto_shard(dataset, tf.data.experimental.AutoShardPolicy.OFF)


def _with_auto_shard(dataset: tf.data.Dataset, policy: Any) -> tf.data.Dataset:
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    return dataset.with_options(options)


def by_batch_shares(dataset: Any) -> Any:
    """A dataset of global batches that tf.distribute splits across the workers by its DATA policy:
    each worker keeps its share of every global batch. (Arrays' pipelines have no files to shard by.)"""
    return _with_auto_shard(dataset, tf.data.experimental.AutoShardPolicy.DATA) if is_dataset(dataset) else dataset


def global_batch_inputs(x: Any, y: Any, kwargs: dict, replicas: int, *,
                        shard: bool = True) -> tuple[Any, Any, dict]:
    """tf.distribute splits a global batch over replicas: scale per-replica sizes up.

    ``shard=False`` (multi-worker mirrored): every worker reads all the data (tf.data's auto-shard
    policy OFF), for pipelines that already split by worker.
    """
    batch_size = kwargs.get("batch_size")
    if batch_size is None and x is not None and not is_dataset(x) and is_array_input(x):
        batch_size = DEFAULT_BATCH_SIZE  # per replica, as under Horovod
    if batch_size is None:
        if not shard and is_dataset(x):
            x = _without_auto_shard(x)
        return x, y, kwargs
    global_batch = int(batch_size) * replicas
    if not shard and x is not None and not is_dataset(x):
        data = (x,) if y is None else (x, y)
        if kwargs.get("sample_weight") is not None:
            data = data + (kwargs.pop("sample_weight"),)
        shuffle = kwargs.pop("shuffle", True)
        x = tf.data.Dataset.from_tensor_slices(data)
        if shuffle:
            x = x.shuffle(num_examples(data), reshuffle_each_iteration=True)
        x, y = x.batch(global_batch), None
        kwargs.pop("batch_size", None)
    elif is_dataset(x):  # a dataset passed with batch_size holds single examples
        x = x.batch(global_batch)
        del kwargs["batch_size"]
        validation = kwargs.get("validation_data")
        if is_dataset(validation):
            kwargs["validation_data"] = validation.batch(global_batch)
    else:
        kwargs["batch_size"] = global_batch
    if not shard and is_dataset(x):
        x = _without_auto_shard(x)
    return x, y, kwargs


# --- parameter servers: per-worker pipelines the coordinator hands out ------------------------------
def require_steps(kwargs: dict, what: str) -> None:
    if kwargs.get("steps_per_epoch") is None:
        raise InputError(with_fix(
            f"ParameterServerStrategy trains on {what} without knowing where an epoch ends",
            "pass `steps_per_epoch=N` to strategy.fit (N = examples per epoch / batch size)"))


def array_dataset_creator(arrays: tuple, batch_size: int, shuffle: bool, shard: bool, workers: int) -> Any:
    """Each of the ``workers`` reads its own shard of the arrays (all of them without ``shard``),
    shuffled, repeated, batched. The shard is the worker's index
    (``tf.distribute.coordinator.experimental_get_current_worker_index``, read where the coordinator
    builds the worker's dataset): the ``InputContext`` a parameter-server strategy hands the function
    says one pipeline on every worker (``parameter_server_strategy_v2.py``, ``num_input_pipelines_in_sync
    = 1``), so sharding by it splits nothing. Autotuning is off (``without_autotune``): each worker's
    iterator is freed at the end of ``fit``, and freeing an autotuned one can take up to a minute."""
    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices(arrays)
        if shard and workers > 1:
            dataset = dataset.shard(workers, tf.distribute.coordinator.experimental_get_current_worker_index())
        if shuffle:
            dataset = dataset.shuffle(4096)
        return without_autotune(dataset.repeat().batch(batch_size).prefetch(2))

    return tf_keras.utils.experimental.DatasetCreator(dataset_fn)


def finite_eval_dataset(data: Any, batch_size: int | None, steps: int | None,
                        batch_datasets: bool) -> tuple[tf.data.Dataset, int]:
    """An evaluation dataset the coordinator can read from any worker: repeated, with a step count.

    Arrays are batched by ``batch_size`` (default 32); a dataset only when ``batch_datasets``
    says it holds single examples.

    Each worker reads its own copy, so the evaluated batches are the first ``steps`` batches
    handed out across workers: an estimate, exact when one worker evaluates.
    """
    if is_dataset(data):
        dataset = data.batch(int(batch_size)) if batch_datasets and batch_size is not None else data
    else:
        dataset = tf.data.Dataset.from_tensor_slices(tuple(data) if isinstance(data, list) else data)
        dataset = dataset.batch(int(batch_size or DEFAULT_BATCH_SIZE))
    if steps is None:
        steps = int(dataset.cardinality().numpy())
        if steps < 1:
            raise InputError(with_fix("the evaluation data has an unknown or infinite length",
                                      "pass `validation_steps=` (in fit) or `steps=` (in evaluate)"))
    return dataset.repeat(), steps


def parameter_server_fit_inputs(x: Any, y: Any, kwargs: dict, *, shard: bool, workers: int) -> tuple[Any, Any, dict]:
    """``fit`` arguments for the coordinator: per-worker pipelines and an explicit epoch length."""
    creator_type = tf_keras.utils.experimental.DatasetCreator
    if isinstance(x, creator_type) or (callable(x) and not is_dataset(x)):
        require_steps(kwargs, "a dataset_fn")
        return (x if isinstance(x, creator_type) else creator_type(x)), y, kwargs
    batch_size = kwargs.pop("batch_size", None)
    unbatched_datasets = is_dataset(x) and batch_size is not None  # tfdist's batch_size rule
    if is_dataset(x):
        dataset = x.batch(int(batch_size)) if batch_size is not None else x
        if kwargs.get("steps_per_epoch") is None:
            cardinality = int(dataset.cardinality().numpy())
            if cardinality < 1:
                require_steps(kwargs, "a dataset whose length is unknown or infinite")
            kwargs["steps_per_epoch"] = cardinality
        # tf-keras hands every worker its own iterator over the whole dataset (shuffle it in the
        # pipeline); pass a dataset_fn to split it by input_context instead.
        x = dataset if dataset.cardinality() == tf.data.INFINITE_CARDINALITY else dataset.repeat()
    elif x is not None:
        batch_size = int(batch_size or DEFAULT_BATCH_SIZE)
        arrays = (x,) if y is None else (x, y)
        if kwargs.get("sample_weight") is not None:
            arrays = arrays + (kwargs.pop("sample_weight"),)
        examples = num_examples(arrays)
        if kwargs.get("steps_per_epoch") is None:
            kwargs["steps_per_epoch"] = -(-examples // batch_size)
        shuffle = kwargs.pop("shuffle", True)
        x, y = array_dataset_creator(arrays, batch_size, shuffle, shard, workers), None
    validation = kwargs.get("validation_data")
    if validation is not None:
        kwargs["validation_data"], steps = finite_eval_dataset(
            validation, batch_size, kwargs.get("validation_steps"), batch_datasets=unbatched_datasets)
        kwargs["validation_steps"] = steps
    return x, y, kwargs


def parameter_server_evaluate_inputs(x: Any, y: Any, kwargs: dict) -> tuple[Any, Any, dict]:
    """``evaluate`` arguments for the coordinator: a repeated dataset with a step count."""
    data = x if y is None else (x, y)
    batch_size = kwargs.pop("batch_size", None)
    dataset, kwargs["steps"] = finite_eval_dataset(data, batch_size, kwargs.get("steps"),
                                                   batch_datasets=batch_size is not None)
    return dataset, None, kwargs
