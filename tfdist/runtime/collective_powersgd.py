"""PowerSGD on tf.distribute's collectives: ``MultiWorkerMirroredStrategy``, tf-keras and Keras 3 (issue 38).

On Horovod, :class:`tfdist.runtime.powersgd.PowerSGD` runs in each rank's train step, its warm-up a
``tf.cond`` on the step count around Horovod's allreduces. Under ``MultiWorkerMirroredStrategy`` the
same ``tf.cond`` cannot hold the collectives in *replica* context: ``ReplicaContext.all_reduce`` goes
through ``merge_call`` on the CPU (``CollectiveAllReduceExtended._use_merge_call``, true unless XLA on
GPUs only: tensorflow/python/distribute/collective_all_reduce_strategy.py:388), and ``merge_call``
refuses to run from inside a control-flow branch, whose body is another graph
(tensorflow/python/distribute/mirrored_run.py:501, "`merge_call` called while defining a new graph").

So PowerSGD runs in *cross-replica* context instead, inside the one ``merge_call`` that tf-keras'
optimizer already makes to aggregate a step's gradients. ``Optimizer.apply_gradients`` calls
``self.aggregate_gradients(grads_and_vars)``, which tf-keras documents as the method to override for
one's own aggregation (tf_keras/src/optimizers/optimizer.py:1249-1270, :1307); its default
(tf_keras/src/optimizers/utils.py ``all_reduce_sum_gradients``) makes a ``merge_call`` whose function
calls ``strategy.extended.batch_reduce_to(SUM, ...)``. The instance's ``aggregate_gradients`` here
makes the same ``merge_call`` with a function that runs PowerSGD: in cross-replica context
``batch_reduce_to`` is a plain collective, and a ``tf.cond`` around it is an ordinary branch (every
worker takes the same one: the step count is the same everywhere). ``fit``, ``train_on_batch`` and a
custom loop's ``optimizer.apply_gradients`` all come through it. Only public tf.distribute and tf-keras
API is used (``merge_call``, ``experimental_local_results``,
``experimental_distribute_values_from_function``, ``batch_reduce_to``, ``aggregate_gradients``).

Keras 3's TensorFlow optimizer sums a step's gradients over the replicas in one place,
``_all_reduce_sum_gradients`` (keras/src/backend/tensorflow/optimizer.py, called by
``_backend_update_step`` in replica context); the same function replaces it on the instance, through
``tfdist.upstream`` (private, so checked to exist first). Its units are tf-keras': each replica's loss
is divided by the replicas.

Units: under tf.distribute each replica's loss is already divided by the replicas (tf-keras scales it
for the SUM the default aggregation makes), so each worker's gradient is multiplied by the replicas
before PowerSGD's mean: the errors are in the units of the job's gradient, as on Horovod, and at full
rank the result is tf-keras' own SUM.

State: one ``PowerSGD(per_worker=True)`` on the optimizer (``POWERSGD_STATE``, tracked, so
``tf.train.Checkpoint``, ``BackupAndRestore`` and ``ModelCheckpoint`` keep it). Its variables are
``ON_READ``: each worker keeps its own errors, which tf.distribute would otherwise force equal; read
across the workers (which every worker's save does, as MultiWorkerMirrored saves on every worker)
the errors are their MEAN, the one thing later steps depend on, so every checkpoint is the whole
state. :func:`synchronize_powersgd` makes each worker's errors that mean at the end of each epoch
(``SynchronizePowerSGD``), so a resumed run and the run that went on hold the same state.

Under ``mixed_float16`` tf-keras' ``LossScaleOptimizer`` unscales the gradients in its
``compute_gradients`` (tf_keras/src/mixed_precision/loss_scale_optimizer.py, ``LossScaleOptimizerV3``)
before its ``apply_gradients`` aggregates them through the same method, then tests the aggregated
values for overflow: PowerSGD sees gradients in their own units, and a step whose result is not finite
(an overflow reaches every worker through the means) leaves its state as it was
(:mod:`tfdist.runtime.powersgd`), as the loss-scale optimizer skips it on every worker. (Under Horovod
the allreduce runs inside ``compute_gradients``, on scaled gradients: ``tfdist.runtime.allreduce``.)

One replica per worker (one process per GPU, or the CPU): the state keeps one copy a worker.
Importing this module does not import TensorFlow.
"""
from __future__ import annotations

from typing import Any

from tfdist import upstream
from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix
from tfdist.keras_compat import KERAS_3, TF_KERAS, flavour_of
from tfdist.runtime.allreduce import POWERSGD_STATE, powersgd_state

#: Set on an optimizer whose gradient aggregation runs PowerSGD (its settings).
COLLECTIVE_POWERSGD_MARK = "_tfdist_collective_powersgd"


def powersgd_optimizer(optimizer: Any, settings: Any, strategy: Any) -> Any:
    """``optimizer`` (tf-keras or Keras 3, created in ``strategy.scope()``) aggregating its gradients over the workers
    of ``strategy`` (a ``tf.distribute.MultiWorkerMirroredStrategy``) through PowerSGD with ``settings``
    (a :class:`tfdist.runtime.lowrank.PowerSGDSettings`). Returns the same object."""
    flavour = flavour_of(optimizer)
    if flavour not in (TF_KERAS, KERAS_3):
        raise ArgumentTypeError(with_fix(
            f"`optimizer` must be a tf-keras or Keras 3 optimizer, got {type(optimizer).__module__}."
            f"{type(optimizer).__name__}", "pass e.g. tf.keras.optimizers.SGD(0.1)"))
    inner = upstream.loss_scale_inner(optimizer)
    if inner is not None and flavour == KERAS_3:
        raise ArgumentValueError(refusal_of_keras3_loss_scaling())
    if inner is not None:  # a tf-keras LossScaleOptimizer given: PowerSGD goes inside (unscaled gradients)
        powersgd_optimizer(inner, settings, strategy)
        return optimizer
    if getattr(optimizer, COLLECTIVE_POWERSGD_MARK, None) is not None:
        raise ArgumentValueError(with_fix(
            f"this {type(optimizer).__name__} already aggregates its gradients through PowerSGD (it went "
            "through strategy.optimizer before)", "wrap a new optimizer, once"))
    local = local_replicas(strategy)
    if local != 1:
        raise ArgumentValueError(refusal_of_local_replicas(local))

    def aggregate_gradients(grads_and_vars: Any) -> list:
        return _aggregate(optimizer, settings, list(grads_and_vars))

    if flavour == KERAS_3:  # where Keras 3's TensorFlow optimizer sums a step's gradients over the replicas
        upstream.replace_keras3_gradient_sum(optimizer, aggregate_gradients)
    elif not callable(getattr(type(optimizer), "aggregate_gradients", None)):
        raise upstream.UpstreamChangedError(with_fix(
            f"{type(optimizer).__name__} has no `aggregate_gradients`, where tf-keras aggregates a step's "
            f"gradients and PowerSGD goes (tested with {upstream.PINNED})",
            "install the versions pinned in tfdist's constraints.txt"))
    else:
        optimizer.aggregate_gradients = aggregate_gradients  # tf-keras' documented override, on this instance
    setattr(optimizer, COLLECTIVE_POWERSGD_MARK, settings)
    return optimizer


def aggregates_through_powersgd(optimizer: Any) -> bool:
    """Whether ``optimizer`` (or the one a tf-keras ``LossScaleOptimizer`` wraps) went through
    :func:`powersgd_optimizer`."""
    return any(getattr(candidate, COLLECTIVE_POWERSGD_MARK, None) is not None
               for candidate in upstream.self_and_inner(optimizer))


def local_replicas(strategy: Any) -> int:
    """The replicas ``strategy`` runs in this process (its local devices)."""
    return len(strategy.extended.worker_devices)


def refusal_of_local_replicas(local: int) -> str:
    return with_fix(
        f"compression='powersgd' with {local} replicas in each worker: PowerSGD keeps one error feedback per "
        "worker, and MultiWorkerMirroredStrategy here runs several replicas in one process",
        "run one worker process per GPU (tfdist launch --workers N with CUDA_VISIBLE_DEVICES set per worker), "
        "or train with make_strategy('horovod', compression='powersgd'), which runs one rank per GPU")


def refusal_of_keras3_loss_scaling() -> str:
    return with_fix(
        "compression='powersgd' under multi_worker_mirrored with a Keras 3 LossScaleOptimizer (what its "
        "compile adds under mixed_float16): it tests each worker's own gradients for overflow before they are "
        "summed, so the workers could disagree on which steps to skip", "use mixed_bfloat16 (no loss "
        "scaling), a tf-keras model, or make_strategy('horovod', compression='powersgd'), whose Keras 3 loss "
        "scaling sees the allreduced gradients")


def refuse_compiled_keras3_loss_scale(optimizer: Any) -> None:
    """Refuse the Keras 3 ``LossScaleOptimizer`` that compile put (mixed_float16) around an optimizer that
    aggregates through PowerSGD (:func:`refusal_of_keras3_loss_scaling`); a tf-keras one needs nothing."""
    if flavour_of(optimizer) != KERAS_3:
        return
    inner = upstream.loss_scale_inner(optimizer)
    if inner is not None and getattr(inner, COLLECTIVE_POWERSGD_MARK, None) is not None:
        raise ArgumentValueError(refusal_of_keras3_loss_scaling())


def _aggregate(optimizer: Any, settings: Any, pairs: list) -> list:
    """``(gradient, variable)`` pairs with each gradient the job's (the SUM over the replicas, as tf-keras'
    own aggregation gives) through PowerSGD; ``None`` gradients kept in place. Called in replica context."""
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None:
        raise ArgumentValueError(with_fix(
            "PowerSGD's aggregate_gradients was called in cross-replica context",
            "call optimizer.apply_gradients inside strategy.run (fit and tfdist's loop do)"))
    present = [i for i, (grad, _) in enumerate(pairs) if grad is not None]
    if not present:
        raise ArgumentValueError(with_fix(
            f"no gradients for any of the variables {[v.name for _, v in pairs]}",
            "give compile a loss, or check that the loss depends on the model's weights"))
    reduced = context.merge_call(lambda strategy, grads: _reduce_across_workers(strategy, grads, optimizer, settings),
                                 args=([pairs[i][0] for i in present],))
    out = [(None, variable) for _, variable in pairs]
    for i, value in zip(present, reduced):
        out[i] = (value, pairs[i][1])
    return out


def _reduce_across_workers(strategy: Any, grads: list, optimizer: Any, settings: Any) -> list:
    """In cross-replica context: this worker's gradients (one local replica) through PowerSGD, whose
    allreduces are ``batch_reduce_to(MEAN)`` collectives. The state is made on the first trace."""
    import tensorflow as tf

    from tfdist.runtime.powersgd import PowerSGD

    replicas = strategy.num_replicas_in_sync
    tensors = []
    for grad in grads:
        local = strategy.experimental_local_results(grad)
        if len(local) != 1:
            raise ArgumentValueError(refusal_of_local_replicas(len(local)))
        tensor = tf.convert_to_tensor(local[0])  # an embedding's IndexedSlices made dense
        tensors.append(tensor * tf.cast(replicas, tensor.dtype))  # a replica's part of the SUM, as a mean
    compressor = getattr(optimizer, POWERSGD_STATE, None)
    if compressor is None:
        with tf.init_scope():  # made once, eagerly, in the strategy's scope: ON_READ variables
            compressor = PowerSGD([t.shape for t in tensors], settings, per_worker=True)
            setattr(optimizer, POWERSGD_STATE, compressor)  # a checkpoint restored earlier fills it here
    reduced = compressor.reduce(tensors, lambda values: allreduce_mean(strategy, values))
    # the job's mean gradient is what tf-keras' SUM of the replicas' scaled parts is: applied as it is
    return [tf.cast(value, tensor.dtype) for value, tensor in zip(reduced, tensors)]


def allreduce_mean(strategy: Any, values: list) -> list:
    """``values`` (this worker's tensors, one local replica) averaged over the workers of ``strategy``,
    in cross-replica context: one ``batch_reduce_to`` of per-replica values."""
    import tensorflow as tf

    if not values:
        return []
    per_replica = [strategy.experimental_distribute_values_from_function(lambda _, value=value: value)
                   for value in values]
    reduced = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.MEAN, [(v, v) for v in per_replica])
    return [strategy.experimental_local_results(value)[0] for value in reduced]


def synchronize_powersgd(optimizer: Any, strategy: Any) -> bool:
    """Give every worker the mean of the workers' PowerSGD errors (one ``batch_reduce_to`` of the
    compressed matrices; no later step changes: :meth:`tfdist.runtime.powersgd.PowerSGD.synchronize`).
    Every worker calls it, eagerly. Whether there was a per-worker state to synchronise."""
    state = powersgd_state(optimizer)
    if state is None or not getattr(state, "per_worker", False):
        return False
    with strategy.scope():
        state.synchronize(lambda values: allreduce_mean(strategy, values))
    return True


__all__ = ["aggregates_through_powersgd", "allreduce_mean", "local_replicas", "powersgd_optimizer", "refuse_compiled_keras3_loss_scale",
           "synchronize_powersgd"]
