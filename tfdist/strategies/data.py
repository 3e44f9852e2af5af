"""Input preparation shared by the backends: sharding by rank with equal step counts.

Every rank must run the same number of steps, or the ranks that finish first leave the others
waiting in an allreduce forever. The helpers here therefore truncate to the smallest shard.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf


class InputError(ValueError):
    """The training data cannot be split evenly as given; the message says what to pass."""


def is_dataset(value: Any) -> bool:
    return isinstance(value, tf.data.Dataset)


def num_examples(structure: Any) -> int:
    """The shared first dimension of a (nested) structure of arrays."""
    lengths = {len(leaf) for leaf in tf.nest.flatten(structure) if leaf is not None}
    if len(lengths) != 1:
        raise InputError(f"the input arrays have different numbers of examples: {sorted(lengths)}; "
                         "fix: pass x, y and sample_weight with the same first dimension")
    return lengths.pop()


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
        raise InputError(f"{total} examples cannot be split over {size} ranks; "
                         "fix: pass at least one example per rank")
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
        raise InputError(f"`{argument}` is an infinite dataset, so the number of steps is unknown; "
                         f"fix: pass `{'steps_per_epoch' if argument == 'x' else 'validation_steps'}`")
    if cardinality == tf.data.UNKNOWN_CARDINALITY:
        raise InputError(
            f"the cardinality of `{argument}` is unknown (filter/flat_map/generator), so its shards "
            "could give ranks different step counts and hang the job; fix: pass "
            f"`{'steps_per_epoch' if argument == 'x' else 'validation_steps'}` or apply "
            "`dataset.apply(tf.data.experimental.assert_cardinality(N))`")
    per_rank = cardinality // size
    if per_rank == 0:
        raise InputError(f"`{argument}` has {cardinality} elements, fewer than the {size} ranks; "
                         "fix: give every rank at least one element")
    sharded = sharded.take(per_rank)
    if batch_size is not None:
        sharded = sharded.batch(batch_size)
    return sharded, None
