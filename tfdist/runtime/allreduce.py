"""Gradient allreduce and variable broadcast for both Kerases, on Horovod's collective ops.

tf-keras optimizers get Horovod's own ``DistributedOptimizer`` (its hook in ``_aggregate_gradients``
is what tf-keras calls). Keras 3 never calls that hook, so Horovod's wrapper trains there without
ever allreducing (horovod#4290): for a Keras 3 optimizer the allreduce goes into the instance's
``apply`` instead, which ``apply_gradients`` and every Keras 3 train step call with the raw
gradients, before loss-scale unscaling, clipping and weight decay. The optimizer keeps its class,
so ``model.save`` and ``keras.models.load_model`` work as before.

Mixed precision (horovod#2989): loss scaling stays outside the allreduce. The gradients are
allreduced while still scaled (PowerSGD divides them by the current scale: ``LOSS_SCALE_OF``), so ``compression=fp16`` does not flush small ones to zero, and the
loss-scale optimizer then tests the allreduced values, the same on every rank: every rank makes the
same finite/skip decision and applies the same update. tf-keras: ``LossScaleOptimizer(Horovod's
wrapper)`` (what ``compile`` builds under ``mixed_float16``; a ``LossScaleOptimizer`` given to us is
rebuilt that way). Keras 3: the ``LossScaleOptimizer``'s ``apply`` allreduces; under a
``mixed_float16`` global policy the optimizer is wrapped in one first (as ``compile`` would).

Gradient accumulation on Keras 3 (``gradient_accumulation_steps=k``, which ``backward_passes_per_step``
maps onto): the allreduce goes into the optimizer's ``_clip_gradients``, which Keras calls once per
update on the mean of the k accumulated gradients, so gradients move once per k micro-steps.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from tfdist import upstream
from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix
from tfdist.keras_compat import KERAS_3, TF_KERAS, flavour_of

#: Set on a Keras 3 optimizer whose ``apply`` allreduces (the settings it does it with).
ALLREDUCE_MARK = "_tfdist_allreduce"
#: The optimizer attribute that holds PowerSGD's state (:class:`tfdist.runtime.powersgd.PowerSGD`): a
#: tracked ``tf.Module``, so ``tf.train.Checkpoint(optimizer=...)`` and the backups keep it.
POWERSGD_STATE = "tfdist_powersgd"
#: Set on the optimizer that holds PowerSGD's state when a loss-scale optimizer hands it scaled
#: gradients: a function giving the current loss scale (PowerSGD compresses the unscaled ones).
LOSS_SCALE_OF = "_tfdist_loss_scale"


def follow_loss_scale(owner: Any, loss_scale_optimizer: Any) -> None:
    """Have the PowerSGD state of ``owner`` read its gradients' scale from ``loss_scale_optimizer``
    (public API of both Kerases: tf-keras' ``loss_scale``, Keras 3's ``scale_loss``, which reads the
    scale's variable once the optimizer is built: it is built before the allreduce)."""
    if flavour_of(loss_scale_optimizer) == KERAS_3:
        setattr(owner, LOSS_SCALE_OF, lambda: loss_scale_optimizer.scale_loss(1.0))
    else:
        setattr(owner, LOSS_SCALE_OF, lambda: loss_scale_optimizer.loss_scale)


def loss_scale_of(owner: Any) -> Any:
    """The loss scale ``owner``'s gradients carry (a tensor, read when traced), or None."""
    source = getattr(owner, LOSS_SCALE_OF, None)
    return None if source is None else source()


@dataclasses.dataclass(frozen=True)
class AllreduceSettings:
    """How gradients are combined over the ranks (Horovod's ``DistributedOptimizer`` arguments).

    op: ``hvd.Average`` or ``hvd.Sum`` (Horovod's DistributedOptimizer refuses ``hvd.Adasum``).
    compression: ``hvd.Compression.none`` or ``hvd.Compression.fp16``.
    gradient_predivide_factor: with Average, scale by 1/f before the sum and f/size after it.
    sparse_as_dense: densify ``IndexedSlices`` gradients (embeddings) before the allreduce.
    backward_passes_per_step: local steps accumulated per allreduce (Keras 3: the optimizer's
        ``gradient_accumulation_steps``).
    average_aggregated_gradients: average (True) or sum (False) the accumulated local gradients.
    powersgd: a :class:`tfdist.runtime.powersgd.PowerSGDSettings`: matrices go through PowerSGD's
        low-rank allreduce (``compression`` then applies to the rest), else None.
    """

    op: Any
    compression: Any
    gradient_predivide_factor: float = 1.0
    sparse_as_dense: bool = False
    backward_passes_per_step: int = 1
    average_aggregated_gradients: bool = True
    num_groups: int = 0
    device_dense: str = ""
    device_sparse: str = ""
    name: str | None = None
    process_set: Any = None
    powersgd: Any = None

    def __post_init__(self) -> None:
        if not self.gradient_predivide_factor > 0:
            raise ArgumentValueError(with_fix(
                f"`gradient_predivide_factor` must be > 0, got {self.gradient_predivide_factor!r}",
                "leave it at 1.0, or pass e.g. the number of ranks"))
        if not isinstance(self.backward_passes_per_step, int) or self.backward_passes_per_step < 1:
            raise ArgumentValueError(with_fix(
                f"`backward_passes_per_step` must be an integer >= 1, got {self.backward_passes_per_step!r}",
                "leave it at 1 (allreduce every step)"))
        if not isinstance(self.num_groups, int) or self.num_groups < 0:
            raise ArgumentValueError(with_fix(f"`num_groups` must be an integer >= 0, got {self.num_groups!r}",
                                              "leave it at 0 (one group)"))


def distributed_optimizer(optimizer: Any, settings: AllreduceSettings) -> Any:
    """``optimizer`` set up to average its gradients over all Horovod ranks before every update.

    A tf-keras optimizer comes back wrapped by Horovod's ``DistributedOptimizer`` (a
    ``LossScaleOptimizer`` comes back as one around Horovod's wrapper); a Keras 3 one comes back as
    the same object, allreducing in ``apply`` (or once per update when it accumulates), except
    under a ``mixed_float16`` global policy, where it comes back inside a ``LossScaleOptimizer``.
    """
    flavour = flavour_of(optimizer)
    if flavour == TF_KERAS:
        return _horovod_keras_optimizer(optimizer, settings)
    if flavour == KERAS_3:
        return _allreduce_in_apply(optimizer, settings)
    raise ArgumentTypeError(with_fix(
        f"`optimizer` must be a tf-keras or Keras 3 optimizer, got {type(optimizer).__module__}."
        f"{type(optimizer).__name__}", "pass e.g. keras.optimizers.Adam(1e-3)"))


def _refuse_powersgd_here(optimizer: Any, settings: AllreduceSettings, hvd: Any, steps: int) -> None:
    """What PowerSGD does not combine with yet, refused with the fix."""
    if settings.powersgd is None:
        return
    if settings.op != hvd.Average:
        raise ArgumentValueError(with_fix("compression='powersgd' averages gradients (op=hvd.Sum was given)",
                                          "leave op at hvd.Average with PowerSGD"))
    if steps > 1 and flavour_of(optimizer) == TF_KERAS:
        raise ArgumentValueError(with_fix(
            f"compression='powersgd' with Horovod's tf-keras accumulation (backward_passes_per_step={steps}): "
            "its accumulation helper keeps Horovod's own allreduce",
            "accumulate with a Keras 3 optimizer (gradient_accumulation_steps), or drop one of the two"))


def _horovod_keras_optimizer(optimizer: Any, settings: AllreduceSettings) -> Any:
    import horovod.tensorflow as hvd

    _refuse_powersgd_here(optimizer, settings, hvd, settings.backward_passes_per_step)
    inner = upstream.loss_scale_inner(optimizer)
    if inner is not None:  # LossScaleOptimizer(Horovod(inner)): the allreduce sees scaled gradients
        import tf_keras

        refuse_tf_keras_loss_scale_accumulation(optimizer, settings.backward_passes_per_step)
        wrapped = _horovod_keras_optimizer(inner, settings)
        outer = tf_keras.mixed_precision.LossScaleOptimizer(
            wrapped, dynamic=optimizer.dynamic, initial_scale=optimizer.initial_scale,
            **({"dynamic_growth_steps": optimizer.dynamic_growth_steps} if optimizer.dynamic else {}))
        if settings.powersgd is not None:
            follow_loss_scale(wrapped, outer)
        return outer
    extra = {} if settings.process_set is None else {"process_set": settings.process_set}
    wrapped = upstream.horovod_tf_keras_optimizer(
        optimizer, name=settings.name, device_dense=settings.device_dense, device_sparse=settings.device_sparse,
        compression=settings.compression, sparse_as_dense=settings.sparse_as_dense,
        gradient_predivide_factor=settings.gradient_predivide_factor, op=settings.op,
        backward_passes_per_step=settings.backward_passes_per_step,
        average_aggregated_gradients=settings.average_aggregated_gradients,
        num_groups=settings.num_groups, **extra)
    setattr(wrapped, ALLREDUCE_MARK, settings)
    if settings.powersgd is not None:
        reduce = _gradient_reducer(hvd, lambda: getattr(wrapped, ALLREDUCE_MARK), wrapped)
        upstream.replace_horovod_allreduce(wrapped, lambda grads, variables=None: reduce(list(grads)))
    return wrapped


def averages_over_ranks(optimizer: Any) -> bool:
    """Whether ``optimizer`` (or the one a loss-scale optimizer wraps) averages its gradients over the
    Horovod ranks: set up by :func:`distributed_optimizer` (``strategy.optimizer``, tfdist.horovod's
    ``DistributedOptimizer``), or Horovod's own wrapper of a tf-keras optimizer (its ``_allreduce_grads``;
    around a Keras 3 optimizer it allreduces in methods Keras 3 never calls, horovod/horovod#4290)."""
    candidates = upstream.self_and_inner(optimizer)
    return _marked(candidates) or any(_horovods_own(candidate) for candidate in candidates)


def averages_through_horovods_own(optimizer: Any) -> bool:
    """Whether ``optimizer`` averages through Horovod's own tf-keras wrapper, not tfdist's: it combines
    the gradients as it was built, so the strategy's allreduce options do not reach it."""
    candidates = upstream.self_and_inner(optimizer)
    return not _marked(candidates) and any(_horovods_own(candidate) for candidate in candidates)


def _marked(candidates: list) -> bool:
    """Whether one of ``candidates`` went through :func:`distributed_optimizer` (tfdist's mark)."""
    return any(getattr(candidate, ALLREDUCE_MARK, None) is not None for candidate in candidates)


def _horovods_own(candidate: Any) -> bool:
    return flavour_of(candidate) == TF_KERAS and callable(getattr(candidate, "_allreduce_grads", None))


def refuse_tf_keras_loss_scale_accumulation(optimizer: Any, backward_passes_per_step: int) -> None:
    """Refuse Horovod's local accumulation under a tf-keras ``LossScaleOptimizer``: the loss-scale
    optimizer skips non-finite micro-steps on its own rank, which Horovod's step counter never hears
    of, so the ranks would stop agreeing on when to allreduce."""
    inner = upstream.loss_scale_inner(optimizer)
    if inner is None or backward_passes_per_step == 1 or flavour_of(optimizer) != TF_KERAS:
        return
    raise ArgumentValueError(with_fix(
        f"`backward_passes_per_step`={backward_passes_per_step} with the tf-keras {type(optimizer).__name__} "
        f"around {type(inner).__name__}: Horovod's local accumulation cannot see the loss-scale "
        "optimizer's skipped steps",
        "leave backward_passes_per_step at 1 with mixed_float16 on tf-keras (or use mixed_bfloat16, which "
        "needs no loss scaling, or a Keras 3 model, whose accumulation composes with it)"))


def _allreduce_in_apply(optimizer: Any, settings: AllreduceSettings) -> Any:
    """A Keras 3 optimizer that allreduces: in ``apply`` (scaled, before a loss-scale optimizer's
    finite test), or once per update when it accumulates gradients."""
    import horovod.tensorflow as hvd

    _refuse_wrapped(optimizer)
    if settings.op not in (hvd.Average, hvd.Sum):
        raise ArgumentValueError(with_fix(
            f"`op`={settings.op!r} is not available for Keras 3 optimizers in tfdist",
            "pass op=hvd.Average (the default) or op=hvd.Sum"))
    if upstream.loss_scale_inner(optimizer) is None and _mixed_float16():
        import keras  # what compile(...) would do under this policy; then the allreduce goes outside

        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    inner = upstream.loss_scale_inner(optimizer)
    if inner is not None:
        _refuse_wrapped(inner)
    steps = _accumulation_steps(optimizer if inner is None else inner, settings)
    _refuse_powersgd_here(optimizer, settings, hvd, steps)
    reduce = _gradient_reducer(hvd, lambda: getattr(optimizer, ALLREDUCE_MARK), optimizer)  # read when
    # traced: change_compression takes effect at the next trace
    if steps > 1:
        if inner is not None and settings.compression is not hvd.Compression.none:
            raise ArgumentValueError(with_fix(
                f"compression=fp16 with gradient accumulation ({steps} steps) inside a Keras 3 "
                "LossScaleOptimizer: the accumulated gradients are unscaled, and float16 would flush small "
                "ones to zero", "drop compression='fp16' here, or accumulate without mixed_float16 (or use "
                "mixed_bfloat16)"))
        _allreduce_per_update(optimizer if inner is None else inner, reduce, steps,
                              average=settings.average_aggregated_gradients)
        if inner is not None:
            _same_finite_decision(hvd, optimizer)
    else:
        apply = optimizer.apply  # the class's bound method; the instance attribute shadows it
        follows_scale = inner is not None and settings.powersgd is not None

        def allreduce_then_apply(grads: Sequence[Any], trainable_variables: Any = None) -> Any:
            if follows_scale and not optimizer.built and trainable_variables is not None:
                optimizer.build(trainable_variables)  # the scale PowerSGD reads is then its variable
            return apply(reduce(list(grads)), trainable_variables)

        optimizer.apply = allreduce_then_apply
        if follows_scale:
            follow_loss_scale(optimizer, optimizer)
    setattr(optimizer, ALLREDUCE_MARK, settings)
    return optimizer


def _refuse_wrapped(optimizer: Any) -> None:
    if getattr(optimizer, ALLREDUCE_MARK, None) is not None:
        raise ArgumentValueError(with_fix(
            f"this {type(optimizer).__name__} already allreduces its gradients (it went through "
            "DistributedOptimizer or strategy.optimizer before)",
            "wrap a new optimizer, once (a LossScaleOptimizer around the plain optimizer, not around a "
            "distributed one)"))


def _mixed_float16() -> bool:
    """Whether Keras 3's global dtype policy is ``mixed_float16`` (its ``compile`` then adds loss scaling)."""
    import keras

    return keras.mixed_precision.global_policy().name == "mixed_float16"


def _accumulation_steps(optimizer: Any, settings: AllreduceSettings) -> int:
    """The micro-steps per update of a Keras 3 optimizer: its ``gradient_accumulation_steps``, set
    from ``backward_passes_per_step`` when that asks for more than 1."""
    own = getattr(optimizer, "gradient_accumulation_steps", None) or 1
    asked = settings.backward_passes_per_step
    if asked == 1 or asked == own:
        return own
    name = type(optimizer).__name__
    if own != 1:
        raise ArgumentValueError(with_fix(
            f"`backward_passes_per_step`={asked}, but the {name} already has gradient_accumulation_steps={own}",
            "give one of them (they are the same thing on Keras 3)"))
    if upstream.optimizer_is_built(optimizer):
        raise ArgumentValueError(with_fix(
            f"`backward_passes_per_step`={asked} needs gradient accumulators, and this {name} was built "
            "without them", f"wrap the optimizer before compile/fit, or create it with "
            f"gradient_accumulation_steps={asked}"))
    optimizer.gradient_accumulation_steps = asked  # Keras 3 creates the accumulators in build()
    return asked


def _allreduce_per_update(optimizer: Any, reduce: Any, steps: int, average: bool) -> None:
    """Allreduce in ``_clip_gradients``: Keras 3 calls it once per update, on the mean of the
    ``steps`` accumulated gradients (``average=False``: their sum, as Horovod's default)."""
    clip = upstream.clip_gradients(optimizer)

    def allreduce_then_clip(grads: list) -> list:
        grads = reduce(list(grads))
        if not average:
            grads = [g if g is None else g * steps for g in grads]
        return clip(grads)

    upstream.replace_clip_gradients(optimizer, allreduce_then_clip)


def _same_finite_decision(hvd: Any, loss_scale: Any) -> None:
    """Make a Keras 3 loss-scale optimizer skip a micro-step on every rank when any rank's gradients
    are not finite (one float allreduced with Min): ranks stay on the same step count and scale."""
    import tensorflow as tf

    check = loss_scale.check_finite

    def finite_everywhere(grads: list) -> Any:
        local = tf.cast(check(grads), tf.float32)
        return hvd.allreduce(local, op=hvd.Min, name="tfdist.loss_scale.finite") > 0.5

    loss_scale.check_finite = finite_everywhere


def compression_change_problem(optimizer: Any) -> str | None:
    """Why the allreduce of ``optimizer`` (as :func:`distributed_optimizer` returned it) cannot change
    its compression in a running process, or None when :func:`change_compression` can."""
    holder = _compression_holder(optimizer)
    if holder is None:
        return (f"this {type(optimizer).__name__} was not made by tfdist's strategy.optimizer (or "
                "DistributedOptimizer), so tfdist cannot reach its allreduce")
    settings = getattr(holder, ALLREDUCE_MARK)
    if settings.powersgd is not None:
        return "PowerSGD's state (its error feedback and factors) goes with its allreduce"
    if flavour_of(holder) == TF_KERAS and settings.backward_passes_per_step > 1:
        return (f"Horovod's tf-keras accumulation (backward_passes_per_step={settings.backward_passes_per_step}) "
                "keeps the allreduce it was built with")
    return None


def change_compression(optimizer: Any, compression: Any) -> None:
    """Make the allreduce of ``optimizer`` use ``compression`` (``hvd.Compression.none`` or ``.fp16``)
    from the next time the train step is traced; the caller traces it again (``make_train_function(
    force=True)``). Raises ArgumentValueError when :func:`compression_change_problem` says it cannot."""
    problem = compression_change_problem(optimizer)
    if problem is not None:
        raise ArgumentValueError(with_fix(f"cannot change the compression in this process: {problem}",
                                          "restart the job with the other compression"))
    holder = _compression_holder(optimizer)
    settings = dataclasses.replace(getattr(holder, ALLREDUCE_MARK), compression=compression)
    if flavour_of(holder) == TF_KERAS:  # Horovod's wrapper built its allreduce function with the old one
        upstream.rebuild_horovod_allreduce(holder, compression=settings.compression,
                                           sparse_as_dense=settings.sparse_as_dense, op=settings.op,
                                           gradient_predivide_factor=settings.gradient_predivide_factor,
                                           groups=settings.num_groups or None, device_dense=settings.device_dense,
                                           device_sparse=settings.device_sparse, process_set=settings.process_set)
    setattr(holder, ALLREDUCE_MARK, settings)  # a Keras 3 reducer reads it at its next trace


def _compression_holder(optimizer: Any) -> Any:
    """The object that carries ``optimizer``'s allreduce settings: itself, or the optimizer inside
    its loss-scale optimizer (tf-keras), or None when it has none."""
    for candidate in upstream.self_and_inner(optimizer):
        if isinstance(getattr(candidate, ALLREDUCE_MARK, None), AllreduceSettings):
            return candidate
    return None


def rehome_under_loss_scale(optimizer: Any) -> Any:
    """Move the allreduce of a Keras 3 optimizer that ``compile`` wrapped in a ``LossScaleOptimizer``
    afterwards (the model's dtype policy is ``mixed_float16``, the global one was not) out to that
    loss-scale optimizer, before the first step is traced. Returns ``optimizer``."""
    inner = upstream.loss_scale_inner(optimizer)
    settings = None if inner is None else getattr(inner, ALLREDUCE_MARK, None)
    if settings is None or getattr(optimizer, ALLREDUCE_MARK, None) is not None:
        return optimizer
    vars(inner).pop("apply", None)  # our own instance attribute (_allreduce_in_apply), public name
    upstream.restore_clip_gradients(inner)
    delattr(inner, ALLREDUCE_MARK)
    return _allreduce_in_apply(optimizer, dataclasses.replace(settings, backward_passes_per_step=1))


def _gradient_reducer(hvd: Any, current: Callable[[], AllreduceSettings], owner: Any = None):
    """A function from a list of gradients (``None`` kept in place) to their allreduced values, with
    the settings ``current()`` gives when the step is traced; PowerSGD's state, when it compresses,
    is kept on ``owner`` (the optimizer)."""
    import tensorflow as tf

    def reduce(grads: list) -> list:
        settings = current()
        if hvd.size() == 1 and settings.process_set is None:
            return grads
        if settings.powersgd is not None:
            return _powersgd_reduce(hvd, settings, owner, grads)
        op, prescale, postscale = settings.op, 1.0, 1.0
        if settings.op == hvd.Average and settings.gradient_predivide_factor != 1.0:
            op, prescale = hvd.Sum, 1.0 / settings.gradient_predivide_factor
            postscale = settings.gradient_predivide_factor / hvd.size()
        common = {"compression": settings.compression, "op": op, "prescale_factor": prescale,
                  "postscale_factor": postscale, "device_dense": settings.device_dense,
                  "device_sparse": settings.device_sparse}
        if settings.process_set is not None:
            common["process_set"] = settings.process_set
        prefix = settings.name or "tfdist.gradients"
        present = [i for i, g in enumerate(grads) if g is not None]
        tensors = [grads[i] for i in present]
        if settings.sparse_as_dense:
            tensors = [tf.convert_to_tensor(t) if isinstance(t, tf.IndexedSlices) else t for t in tensors]
        dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
        reduced = list(tensors)
        for group_index, group in enumerate(_split(dense, settings.num_groups)):
            values = hvd.grouped_allreduce([tensors[i] for i in group], name=f"{prefix}.{group_index}", **common)
            for i, value in zip(group, values):
                reduced[i] = value
        for i, t in enumerate(tensors):
            if isinstance(t, tf.IndexedSlices):  # an allgather of the slices, as Horovod does
                reduced[i] = hvd.allreduce(t, name=f"{prefix}.sparse.{i}", **common)
        out = list(grads)
        for i, value in zip(present, reduced):
            out[i] = value
        return out

    return reduce


def _powersgd_reduce(hvd: Any, settings: AllreduceSettings, owner: Any, grads: list) -> list:
    """``grads`` averaged over the ranks through PowerSGD (its state made on the first trace, outside
    the function, and kept on ``owner``); ``None`` kept in place, sparse gradients made dense."""
    import tensorflow as tf

    from tfdist.runtime.powersgd import PowerSGD

    present = [i for i, g in enumerate(grads) if g is not None]
    tensors = [tf.convert_to_tensor(grads[i]) for i in present]
    compressor = getattr(owner, POWERSGD_STATE, None)
    if compressor is None:
        with tf.init_scope():  # variables made once, eagerly, as Keras makes an optimizer's slots
            compressor = PowerSGD([t.shape for t in tensors], settings.powersgd)
        setattr(owner, POWERSGD_STATE, compressor)
    calls = iter(range(1_000_000))
    extra = {} if settings.process_set is None else {"process_set": settings.process_set}
    prefix = settings.name or "tfdist.powersgd"

    def allreduce_mean(values: list) -> list:
        return list(hvd.grouped_allreduce(values, name=f"{prefix}.{next(calls)}", op=hvd.Average,
                                          compression=settings.compression, **extra)) if values else []

    reduced = compressor.reduce(tensors, allreduce_mean, scale=loss_scale_of(owner))
    out = list(grads)
    for i, value in zip(present, reduced):
        out[i] = value
    return out


def powersgd_state(optimizer: Any) -> Any:
    """The PowerSGD state of ``optimizer`` (made at its first step), or None: kept on the optimizer
    ``distributed_optimizer`` returned or on the Horovod wrapper inside its loss-scale optimizer."""
    for candidate in upstream.self_and_inner(optimizer):
        state = getattr(candidate, POWERSGD_STATE, None)
        if state is not None:
            return state
    return None


def synchronize_powersgd(optimizer: Any) -> bool:
    """Give every Horovod rank the mean of the ranks' PowerSGD errors (one allreduce of the compressed
    matrices; no later step changes: :meth:`tfdist.runtime.powersgd.PowerSGD.synchronize`), so that
    what the chief checkpoints is the whole state. Whether there was a state to synchronise."""
    state = powersgd_state(optimizer)
    if state is None:
        return False
    import horovod.tensorflow as hvd

    settings = getattr(_compression_holder(optimizer), ALLREDUCE_MARK, None)
    extra = {} if settings is None or settings.process_set is None else {"process_set": settings.process_set}
    if hvd.size() > 1:
        state.synchronize(lambda values: list(hvd.grouped_allreduce(values, op=hvd.Average,
                                                                    name="tfdist.powersgd.errors", **extra)))
    return True


def _split(indices: list[int], groups: int) -> list[list[int]]:
    """``indices`` in ``groups`` contiguous runs of near-equal length (one run when ``groups`` is 0)."""
    if not indices:
        return []
    if groups <= 1:
        return [indices]
    size = -(-len(indices) // groups)
    return [indices[i:i + size] for i in range(0, len(indices), size)]


def tf_variables(variables: Sequence[Any]) -> list[Any]:
    """The ``tf.Variable`` under each variable: a Keras 3 ``keras.Variable`` wraps one in ``.value``
    (Horovod's broadcast assigns to it), a tf-keras variable is one."""
    import tensorflow as tf

    out = []
    for variable in variables:
        inner = variable if isinstance(variable, tf.Variable) else getattr(variable, "value", None)
        if not isinstance(inner, tf.Variable):
            raise ArgumentTypeError(with_fix(
                f"cannot broadcast {type(variable).__module__}.{type(variable).__name__}: it is neither a "
                "tf.Variable nor a Keras 3 variable holding one",
                "pass model.variables / optimizer.variables of a model built with the TensorFlow backend"))
        out.append(inner)
    return out


def broadcast_variables(variables: Sequence[Any], root_rank: int = 0, process_set: Any = None,
                        prefix: str = "tfdist.broadcast") -> None:
    """Give every rank ``root_rank``'s values of ``variables`` (tf-keras or Keras 3 variables), each
    broadcast named by its place in ``variables`` (see ``positional_broadcast``)."""
    resolved = tf_variables(variables)
    if resolved:
        positional_broadcast(resolved, root_rank, process_set, prefix)()


def positional_broadcast(variables: Sequence[Any], root_rank: int, process_set: Any = None,
                         prefix: str = "tfdist.broadcast") -> Callable[[], None]:
    """A traced function that assigns ``root_rank``'s values to ``variables`` (``tf.Variable``s) on every
    rank. Each broadcast is named by its place ``i`` in the list, not by the variable's own name: Keras
    numbers layers per process (``dense_6``), so a rank that built another model first (a chief-only
    summary or evaluation model) names the same weight otherwise, and Horovod, which pairs a collective
    across ranks by its name, waited forever at the first step (Horovod's own ``broadcast_variables``
    names them by variable). The name is ``prefix.<digest>.i``, the digest that of the list's dtypes and
    shapes, the same on every rank: two lists broadcast in one graph (a model's and its optimizer's, in
    Horovod's TF2 example) do not share names."""
    import hashlib

    import horovod.tensorflow as hvd
    import tensorflow as tf

    extra = {} if process_set is None else {"process_set": process_set}
    listed = list(variables)
    layout = "|".join(f"{variable.dtype.name}{tuple(variable.shape)}" for variable in listed)
    digest = hashlib.sha1(layout.encode()).hexdigest()[:10]

    @tf.function(jit_compile=False)
    def from_root() -> None:
        for index, variable in enumerate(listed):
            variable.assign(hvd.broadcast(variable, root_rank, name=f"{prefix}.{digest}.{index}", **extra))

    return from_root
