"""Gradient allreduce and variable broadcast for both Kerases, on Horovod's collective ops.

tf-keras optimizers get Horovod's own ``DistributedOptimizer`` (its hook in ``_aggregate_gradients``
is what tf-keras calls). Keras 3 never calls that hook, so Horovod's wrapper trains there without
ever allreducing (horovod#4290): for a Keras 3 optimizer the allreduce goes into the instance's
``apply`` instead, which ``apply_gradients`` and every Keras 3 train step call with the raw
gradients, before loss-scale unscaling, clipping and weight decay. The optimizer keeps its class,
so ``model.save`` and ``keras.models.load_model`` work as before.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix
from tfdist.keras_compat import KERAS_3, TF_KERAS, flavour_of

#: Set on a Keras 3 optimizer whose ``apply`` allreduces (the settings it does it with).
ALLREDUCE_MARK = "_tfdist_allreduce"


@dataclasses.dataclass(frozen=True)
class AllreduceSettings:
    """How gradients are combined over the ranks (Horovod's ``DistributedOptimizer`` arguments).

    op: ``hvd.Average`` or ``hvd.Sum`` (``hvd.Adasum`` on tf-keras only).
    compression: ``hvd.Compression.none`` or ``hvd.Compression.fp16``.
    gradient_predivide_factor: with Average, scale by 1/f before the sum and f/size after it.
    sparse_as_dense: densify ``IndexedSlices`` gradients (embeddings) before the allreduce.
    backward_passes_per_step: local steps accumulated per allreduce (tf-keras only).
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

    A tf-keras optimizer comes back wrapped by Horovod's ``DistributedOptimizer``; a Keras 3 one
    comes back as the same object, its ``apply`` allreducing first.
    """
    flavour = flavour_of(optimizer)
    if flavour == TF_KERAS:
        return _horovod_keras_optimizer(optimizer, settings)
    if flavour == KERAS_3:
        return _allreduce_in_apply(optimizer, settings)
    raise ArgumentTypeError(with_fix(
        f"`optimizer` must be a tf-keras or Keras 3 optimizer, got {type(optimizer).__module__}."
        f"{type(optimizer).__name__}", "pass e.g. keras.optimizers.Adam(1e-3)"))


def _horovod_keras_optimizer(optimizer: Any, settings: AllreduceSettings) -> Any:
    from horovod.tensorflow.keras import DistributedOptimizer

    extra = {} if settings.process_set is None else {"process_set": settings.process_set}
    return DistributedOptimizer(
        optimizer, name=settings.name, device_dense=settings.device_dense, device_sparse=settings.device_sparse,
        compression=settings.compression, sparse_as_dense=settings.sparse_as_dense,
        gradient_predivide_factor=settings.gradient_predivide_factor, op=settings.op,
        backward_passes_per_step=settings.backward_passes_per_step,
        average_aggregated_gradients=settings.average_aggregated_gradients,
        num_groups=settings.num_groups, **extra)


def _allreduce_in_apply(optimizer: Any, settings: AllreduceSettings) -> Any:
    import horovod.tensorflow as hvd

    if getattr(optimizer, ALLREDUCE_MARK, None) is not None:
        raise ArgumentValueError(with_fix(
            f"this {type(optimizer).__name__} already allreduces its gradients (it went through "
            "DistributedOptimizer or strategy.optimizer before)", "wrap a new optimizer, once"))
    if settings.backward_passes_per_step != 1:
        raise ArgumentValueError(with_fix(
            f"`backward_passes_per_step`={settings.backward_passes_per_step} is not available for Keras 3 "
            "optimizers in tfdist (local accumulation between allreduces is tf-keras only)",
            "leave backward_passes_per_step at 1 for Keras 3 models (or build the model with tf-keras)"))
    if settings.op not in (hvd.Average, hvd.Sum):
        raise ArgumentValueError(with_fix(
            f"`op`={settings.op!r} is not available for Keras 3 optimizers in tfdist",
            "pass op=hvd.Average (the default) or op=hvd.Sum"))
    reduce = _gradient_reducer(hvd, settings)
    apply = optimizer.apply  # the class's bound method; the instance attribute shadows it

    def allreduce_then_apply(grads: Sequence[Any], trainable_variables: Any = None) -> Any:
        return apply(reduce(list(grads)), trainable_variables)

    optimizer.apply = allreduce_then_apply
    setattr(optimizer, ALLREDUCE_MARK, settings)
    return optimizer


def _gradient_reducer(hvd: Any, settings: AllreduceSettings):
    """A function from a list of gradients (``None`` kept in place) to their allreduced values."""
    import tensorflow as tf

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

    def reduce(grads: list) -> list:
        if hvd.size() == 1 and settings.process_set is None:
            return grads
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


def broadcast_variables(variables: Sequence[Any], root_rank: int = 0, process_set: Any = None) -> None:
    """Give every rank ``root_rank``'s values of ``variables`` (tf-keras or Keras 3 variables)."""
    import horovod.tensorflow as hvd

    extra = {} if process_set is None else {"process_set": process_set}
    resolved = tf_variables(variables)
    if resolved:
        hvd.broadcast_variables(resolved, root_rank=root_rank, **extra)
