"""Custom training loops on the strategy object: one ``GradientTape`` loop, unchanged on every backend.

    with strategy.scope():
        model = build_model()                                     # built: keras.Input(...) or model.build
        optimizer = strategy.optimizer(keras.optimizers.SGD(0.1))
    strategy.setup(model, optimizer)                              # checks; Horovod: arms the first broadcast
    data = strategy.distribute(examples.shuffle(2048, seed=0), batch_size=32)   # unbatched; per replica

    @strategy.function                                            # traced once
    def train_step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = strategy.average_loss(loss_fn(y, model(x, training=True)))  # per-example losses in
        strategy.minimize(tape, loss)                             # gradients reduced exactly once
        return {"loss": loss}

    iterator = iter(data)
    for epoch in range(checkpoint.restore(), epochs):
        logs = strategy.reduce("sum", [train_step(iterator) for _ in range(data.steps_per_epoch)])
        checkpoint.save(epoch + 1)                                # the chief writes; the others agree

The loss convention is tf.distribute's: ``average_loss`` is the replica's sum of per-example losses over
the *global* batch, so the replicas' losses add up to the global mean and their gradients are summed
once: by the optimizer's cross-replica sum (tf.distribute) or by Horovod's allreduce, whose average
``minimize`` turns into the sum (it differentiates ``size`` times the loss). A step returns what
``step_fn`` returns summed over the replicas (the job's loss for an ``average_loss``), the same on every
process; ``reduce`` averages a list of them over the steps.

The pure rules (steps per epoch, what the loop refuses) are functions here, without TensorFlow; the
backends' parts are the ``_loop_*`` hooks of ``DistributedStrategy`` and its subclasses.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterator, Sequence

from tfdist.errors import ArgumentTypeError, ArgumentValueError, TfdistError, with_fix

log = logging.getLogger("tfdist")

#: The ops ``reduce`` takes: "sum" for values that add up over replicas (``average_loss``), "mean" for
#: values each replica already holds whole (a metric's ``result()``).
REDUCE_OPS = ("sum", "mean")
#: Set by ``DistributedStrategy.optimizer`` on what it returns: the backend kind it prepared it for.
PREPARED_FOR = "_tfdist_loop_prepared_for"
#: Why a Keras 3 model's variables cannot be sharded over the ps tasks.
PS_KERAS_3_SHARDS_REASON = (
    "a Keras 3 variable of the TensorFlow backend hands TensorFlow its tf.Variable's handle "
    "(`Variable.handle` returns `self.value.handle` in keras/src/backend/tensorflow/core.py), and a "
    "ShardedVariable has none, so the step fails its gradient ('ShardedVariable' object has no "
    "attribute 'handle')")


class LoopError(TfdistError, RuntimeError):
    """The custom-loop API cannot do what was asked here (the message says what to do instead)."""


@dataclasses.dataclass(frozen=True)
class LoopState:
    """What ``setup`` checked and recorded: the model and the optimizer the loop trains."""

    model: Any
    optimizer: Any


# --- pure rules (no TensorFlow) -------------------------------------------------------------------------
def steps_per_epoch(examples: int | None, batch_size: int, replicas: int, given: int | None = None) -> int:
    """The steps of one epoch, the same on every process: ``given``, else ``examples`` over the global
    batch (``batch_size * replicas``), rounded down; ``examples`` is ``None`` when it is not known."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ArgumentValueError(with_fix(f"`batch_size` must be an integer >= 1, got {batch_size!r}",
                                          "pass the batch size per replica, e.g. batch_size=32"))
    if given is not None:
        if not isinstance(given, int) or isinstance(given, bool) or given < 1:
            raise ArgumentValueError(with_fix(f"`steps_per_epoch` must be an integer >= 1, got {given!r}",
                                              "pass e.g. steps_per_epoch=100, or leave it out for a finite dataset"))
        return given
    if examples is None:
        raise ArgumentValueError(with_fix(
            "the dataset's number of examples is not known (infinite, or lost in a filter), so one epoch "
            "has no length", "pass steps_per_epoch=N, or a finite dataset (before .repeat())"))
    global_batch = batch_size * replicas
    if examples < global_batch:
        raise ArgumentValueError(with_fix(
            f"the dataset has {examples} examples, fewer than one global batch of {global_batch} "
            f"({batch_size} per replica x {replicas} replicas)", "pass a smaller batch_size"))
    return examples // global_batch


def loop_refusal(backend: str, flavour: str, replicas: int, loss_scaled: bool, clipping: Sequence[str]) -> str | None:
    """Why the loop cannot train this combination (``flavour``: "tf_keras" or "keras_3"), with the fix;
    ``None`` when it can. ``clipping`` names the optimizer's clipping arguments that are set."""
    if backend == "parameter_server":
        if loss_scaled:
            return with_fix(
                "`optimizer` is a LossScaleOptimizer (mixed_float16), and under parameter servers every worker "
                "would update one shared loss scale on its own, asynchronously, from its own gradients",
                "use mixed_bfloat16 (no loss scaling), or a synchronous backend for float16: horovod, "
                "multi_worker_mirrored or mirrored")
        return None  # one replica per step: clipping sees the step's whole gradient
    if loss_scaled and backend == "horovod" and flavour == "tf_keras":
        return with_fix(
            "`optimizer` is a tf-keras LossScaleOptimizer (mixed_float16), and under horovod its finite test "
            "runs on each rank's own gradients before Horovod's allreduce: ranks that disagree would hang",
            "build the model with Keras 3 (`import keras`), whose loss-scale optimizer tests the allreduced "
            "gradients, or use mixed_bfloat16 (no loss scaling), or strategy.fit")
    if loss_scaled and backend == "multi_worker_mirrored":
        return with_fix(
            "`optimizer` is a LossScaleOptimizer (mixed_float16), which the loop does not run across "
            "workers yet (the finite test must be the same on every worker)",
            "use mixed_bfloat16 (no loss scaling), strategy.fit, or the horovod backend with Keras 3")
    if flavour == "keras_3" and replicas > 1 and backend != "horovod":
        if loss_scaled:
            return with_fix(
                f"`optimizer` is a Keras 3 LossScaleOptimizer over {replicas} replicas: it decides to skip a "
                "step from the first replica's unreduced gradients "
                "(keras/src/optimizers/loss_scale_optimizer.py), so another replica's overflow would reach "
                "the weights", "use mixed_bfloat16 (no loss scaling), one replica, or the horovod backend")
        if clipping:
            return with_fix(
                f"`optimizer` clips ({', '.join(clipping)}), and Keras 3 clips each of the {replicas} replicas' "
                "gradients before it sums them, not the job's gradient",
                "drop the clipping argument, or train on horovod (which clips the allreduced gradient)")
    return None


def check_reduce_op(op: Any) -> str:
    """``op`` lower-cased, if ``reduce`` takes it."""
    if not isinstance(op, str) or op.lower() not in REDUCE_OPS:
        raise ArgumentValueError(with_fix(
            f"`op` must be one of {', '.join(repr(o) for o in REDUCE_OPS)}, got {op!r}",
            "pass 'sum' for values that add up over replicas (strategy.average_loss), 'mean' for values "
            "each replica holds whole (a metric's result())"))
    return op.lower()


def require_setup(state: LoopState | None, call: str) -> LoopState:
    if state is None:
        raise LoopError(with_fix(f"strategy.{call} needs the model and optimizer of the loop, and "
                                 "strategy.setup(model, optimizer) was not called",
                                 "call strategy.setup(model, optimizer) once, after building them in "
                                 "strategy.scope()"))
    return state


def require_callable(step_fn: Any) -> None:
    if not callable(step_fn):
        raise ArgumentTypeError(with_fix(f"`step_fn` must be a function of one batch, got {step_fn!r}",
                                         "decorate the step: @strategy.function above def train_step(batch)"))


# --- the loop's objects ----------------------------------------------------------------------------------
class DistributedData:
    """A dataset as the backend feeds it: ``iter(data)`` gives the iterator a ``Step`` takes, which never
    runs out (the examples repeat); ``steps_per_epoch`` is the same on every process.

    ``batch_size`` is per replica, ``global_batch_size`` is ``batch_size * replicas``. The batches of one
    step over all replicas are exactly one global batch of the stream: process ``p`` of ``P`` takes
    elements ``p, p + P, ...`` of the repeated dataset, so one process on ``global_batch_size`` sees the
    same examples in the same steps (an epoch is ``steps_per_epoch`` steps of that stream)."""

    def __init__(self, make_iterator: Callable[[], Iterator], steps_per_epoch: int, batch_size: int,
                 replicas: int) -> None:
        self._make_iterator = make_iterator
        self.steps_per_epoch = steps_per_epoch
        self.batch_size = batch_size
        self.global_batch_size = batch_size * replicas

    def __iter__(self) -> Iterator:
        return self._make_iterator()

    def __repr__(self) -> str:
        return (f"<DistributedData batch_size={self.batch_size} global_batch_size={self.global_batch_size} "
                f"steps_per_epoch={self.steps_per_epoch}>")


class Step:
    """A training step: ``step(iterator)`` runs ``step_fn`` on the next batch of every replica and returns
    its outputs summed over the replicas. The ``tf.function`` inside is traced once (the iterator's
    element spec is fixed); ``before_call`` runs eagerly before each call (Horovod: a pending broadcast)."""

    def __init__(self, function: Any, before_call: Callable[[], None] | None = None) -> None:
        self._function = function
        self._before_call = before_call

    def __call__(self, iterator: Any) -> Any:
        if self._before_call is not None:
            self._before_call()
        return self._function(iterator)

    def experimental_get_tracing_count(self) -> int:
        """How many times the step was traced (1 once it has run: the loop never retraces)."""
        return self._function.experimental_get_tracing_count()


def stream(dataset: Any, batch_size: int, processes: int, index: int, shard: bool = True) -> Any:
    """This process's batches of ``dataset``: repeated, then every ``processes``-th element from
    ``index`` (when ``shard``), in batches of ``batch_size`` (the last, partial one never comes)."""
    repeated = dataset.repeat()
    if shard and processes > 1:
        repeated = repeated.shard(processes, index)
    return repeated.batch(batch_size, drop_remainder=True)


def per_worker_stream(dataset: Any, batch_size: int, workers: int, shard: bool = True) -> Callable[[], Any]:
    """A ``dataset_fn`` for ``ClusterCoordinator.create_per_worker_dataset``: ``dataset`` (built here, on the
    coordinator) serialized once into a graph that each worker rebuilds, then that worker's ``stream``: worker
    ``w`` of ``workers`` takes elements ``w, w + workers, ...`` of the repeated dataset (when ``shard``).

    The graph is what ``create_per_worker_dataset(dataset)`` itself sends (``DatasetToGraphV2`` with its
    ``WARN`` policy on external state, then ``DatasetFromGraph``); the worker's index is
    ``tf.distribute.coordinator.experimental_get_current_worker_index`` where the worker builds it (the
    ``InputContext`` of a parameter-server strategy says one pipeline on every worker)."""
    import tensorflow as tf

    warn_on_external_state = 0  # tf.data.experimental.ExternalStatePolicy.WARN
    graph = tf.raw_ops.DatasetToGraphV2(input_dataset=tf.data.experimental.to_variant(dataset),
                                        external_state_policy=warn_on_external_state, strip_device_assignment=True)
    spec = dataset.element_spec
    split = shard and workers > 1
    if split and reshuffles_each_epoch(graph):
        from tfdist.strategies.inputs import missed_by_all

        log.warning(
            "tfdist loop: the dataset reshuffles each epoch (shuffle with reshuffle_each_iteration=True, the "
            "default), and under parameter servers each worker rebuilds it with seeds of its own, so the "
            "workers' shards overlap (%s); pass shuffle(..., seed=..., reshuffle_each_iteration=False) for "
            "shards that cover every example once", missed_by_all(workers))

    def dataset_fn() -> Any:
        copy = tf.data.experimental.from_variant(tf.raw_ops.DatasetFromGraph(graph_def=graph), spec)
        index = tf.distribute.coordinator.experimental_get_current_worker_index() if split else 0
        return stream(copy, batch_size, workers, index, split)

    return dataset_fn


def reshuffles_each_epoch(graph: Any) -> bool:
    """Whether a dataset's serialized graph (``DatasetToGraphV2``) holds a shuffle that reshuffles each
    epoch: its seeds come from a seed generator that a copy rebuilt from the graph draws anew."""
    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef.FromString(graph.numpy())
    nodes = [*graph_def.node, *(node for function in graph_def.library.function for node in function.node_def)]
    return any(node.op.startswith("Shuffle") and node.attr["reshuffle_each_iteration"].b for node in nodes)


class Scheduled:
    """A traced step that a ``ClusterCoordinator`` runs on whichever worker is free: calling it schedules
    one step (``schedule(function, args=(iterator,))``) and returns its ``RemoteValue`` at once; ``reduce``
    (or ``fetch``) waits for it. A step whose worker is lost is run again on another worker."""

    def __init__(self, schedule: Callable[..., Any], function: Any) -> None:
        self._schedule = schedule
        self._function = function

    def __call__(self, iterator: Any) -> Any:
        return self._schedule(self._function, args=(iterator,))

    def experimental_get_tracing_count(self) -> int:
        return self._function.experimental_get_tracing_count()


def require_dataset(data: Any) -> Any:
    import tensorflow as tf

    if not isinstance(data, tf.data.Dataset):
        raise ArgumentTypeError(with_fix(
            f"`data` must be an unbatched tf.data.Dataset of examples, got {type(data).__name__}",
            "pass tf.data.Dataset.from_tensor_slices((x, y)) (shuffled with a seed, not batched): "
            "strategy.distribute batches it per replica"))
    return data


def known_examples(dataset: Any) -> int | None:
    """The dataset's number of elements, or ``None`` when TensorFlow does not know it (or it is infinite)."""
    count = int(dataset.cardinality().numpy())
    return count if count >= 0 else None


def average_loss(per_example_loss: Any, replicas: int, sample_weight: Any = None,
                 regularization_losses: Any = None) -> Any:
    """The replica's part of the global mean: ``sum(per_example_loss * sample_weight) / (batch * replicas)``
    plus ``sum(regularization_losses) / replicas``, in float32 (float16 losses are cast first)."""
    import tensorflow as tf

    loss = tf.convert_to_tensor(per_example_loss)
    if loss.shape.rank == 0:
        raise ArgumentValueError(with_fix(
            "`per_example_loss` is a scalar, already reduced over the batch",
            "pass one loss per example: a Keras loss with reduction='none' (or its per-example output)"))
    if loss.dtype != tf.float64:
        loss = tf.cast(loss, tf.float32)
    if sample_weight is not None:
        loss = loss * tf.cast(sample_weight, loss.dtype)
    examples = tf.cast(tf.shape(loss)[0] * replicas, loss.dtype)
    total = tf.reduce_sum(loss) / examples
    if regularization_losses:
        total += tf.add_n([tf.cast(r, loss.dtype) for r in regularization_losses]) / tf.cast(replicas, loss.dtype)
    return total


def is_loss_scaled(optimizer: Any) -> bool:
    from tfdist import upstream

    return upstream.loss_scale_inner(optimizer) is not None


def minimize(tape: Any, loss: Any, variables: Sequence[Any], optimizer: Any, factor: float, flavour: str) -> None:
    """Differentiate ``factor`` times ``loss`` (times the loss scale of a ``LossScaleOptimizer``) with
    respect to ``variables``, and apply the gradients: the optimizer reduces them, once."""
    import tensorflow as tf

    loss_scaled = is_loss_scaled(optimizer)
    seed = None
    if factor != 1.0 or loss_scaled:
        seed = tf.cast(factor, loss.dtype)
        if loss_scaled:
            one = tf.constant(1.0, loss.dtype)
            scale = optimizer.scale_loss(one) if flavour == "keras_3" else optimizer.get_scaled_loss(one)
            seed = seed * tf.cast(scale, loss.dtype)
    grads = tape.gradient(loss, variables, output_gradients=seed)
    if flavour == "keras_3":
        optimizer.apply(grads, variables)  # a LossScaleOptimizer unscales after the reduction
        return
    if loss_scaled:
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, variables))


def reduce_outputs(outputs: Any, op: str, replicas: int) -> Any:
    """``outputs`` (one step's, or a list of steps') as numbers: the mean over the steps of each leaf,
    divided by ``replicas`` for ``op="mean"`` (a step's outputs are already summed over the replicas)."""
    import numpy as np
    import tensorflow as tf

    steps = list(outputs) if isinstance(outputs, list) else [outputs]
    if not steps:
        raise ArgumentValueError(with_fix("`value` is an empty list of step outputs",
                                          "pass the outputs of at least one step"))
    divisor = float(replicas) if op == "mean" else 1.0

    def combine(*leaves: Any) -> Any:
        values = np.stack([np.asarray(leaf) for leaf in leaves]).astype("float64")
        mean = values.mean(axis=0) / divisor
        return float(mean) if mean.ndim == 0 else mean

    try:
        return tf.nest.map_structure(combine, *steps)
    except (ValueError, TypeError) as exc:
        raise ArgumentValueError(with_fix(f"the step outputs in `value` do not share one structure "
                                          f"({str(exc).splitlines()[0]})",
                                          "return the same dict (or tuple) of tensors from every step")) from None
