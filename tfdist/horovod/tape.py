"""Horovod's TF2 ``DistributedGradientTape`` for Keras 3, tf-keras and plain TensorFlow variables.

    with tf.GradientTape() as tape:
        loss_value = loss(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss_value, model.trainable_variables)   # averaged over the ranks

Why: Horovod 0.28.1's tape keys the gradients by ``source.ref()``, which only TensorFlow's own variables
and tensors have. A Keras 3 ``keras.Variable`` is not a ``tf.Variable`` (it keeps one inside), so the
gradient of a Keras 3 model's ``trainable_variables`` raised ``AttributeError: 'Variable' object has
no attribute 'ref'`` (horovod#4290). Here Horovod's own tape does the work, with every Keras 3 variable
it is given (a source, a member of ``groups``, a ``register_local_source`` argument) replaced by the
``tf.Variable`` that holds its value (``tfdist.upstream.keras3_tf_variable``), whose gradient is the
variable's. ``tape.gradient`` returns the gradients in the structure of ``sources`` (a list, a dict, a
single variable), as ``tf.GradientTape.gradient`` does, and honours its ``unconnected_gradients``.

Layering: imports only the ground modules (and Horovod); ``tfdist.horovod`` re-exports it.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.mpi_ops import Adasum, Average, Max, Min, Product, ProcessSet, Sum, global_process_set

from tfdist import upstream
from tfdist.errors import ArgumentTypeError, ArgumentValueError, with_fix
from tfdist.keras_compat import KERAS_3, flavour_of, is_keras

#: The reductions Horovod's tape can combine gradients with (Horovod's own ops).
REDUCE_OPS = {Average: "hvd.Average", Sum: "hvd.Sum", Adasum: "hvd.Adasum", Min: "hvd.Min", Max: "hvd.Max",
              Product: "hvd.Product"}


def is_keras_3_variable(obj: Any) -> bool:
    """Whether ``obj`` is a Keras 3 ``keras.Variable`` (a model's or an optimizer's)."""
    return flavour_of(obj) == KERAS_3 and is_keras(obj, "Variable")


def tf_variable(obj: Any, argument: str) -> Any:
    """The ``tf.Variable`` holding a Keras 3 variable's value; anything else (a ``tf.Variable``, a
    tf-keras variable, a watched tensor) as it is."""
    if not is_keras_3_variable(obj):
        return obj
    variable = upstream.keras3_tf_variable(obj)
    if variable is None:
        raise ArgumentValueError(with_fix(
            f"`{argument}` holds the Keras 3 variable {getattr(obj, 'path', obj)!r}, which has no value yet "
            "(its layer was never built)",
            "call the model on a batch (or model.build(input_shape)) before taking gradients or broadcasting"))
    return variable


def tf_variables(objects: Iterable[Any], argument: str) -> list[Any]:
    """:func:`tf_variable` of each of ``objects``, in order."""
    return [tf_variable(obj, argument) for obj in objects]


def DistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "", device_sparse: str = "",
                            compression: Any = Compression.none, sparse_as_dense: bool = False,
                            op: Any = Average, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                            groups: Any = None, process_set: Any = global_process_set,
                            scale_local_gradients: bool = True) -> tf.GradientTape:
    """``gradtape`` (after its ``with`` block) made to average its gradients over the Horovod ranks:
    Horovod 0.28.1's ``horovod.tensorflow.DistributedGradientTape``, same signature and behaviour, taking
    Keras 3 variables as well (as ``sources``, in ``groups`` and in ``register_local_source``).

    ``groups``: an integer > 0, or lists of variables allreduced together (any Keras). ``num_groups``:
    Horovod's deprecated spelling of an integer ``groups``. Works eagerly and inside ``tf.function``.
    """
    import horovod.tensorflow as hvd

    _check_tape(gradtape)
    _check_options(hvd, compression=compression, op=op, gradient_predivide_factor=gradient_predivide_factor,
                   num_groups=num_groups, groups=groups, process_set=process_set)
    if isinstance(groups, (list, tuple)):
        groups = [tf_variables(group, "groups") for group in groups]
    tape = hvd.DistributedGradientTape(
        gradtape, device_dense=device_dense, device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense, op=op, gradient_predivide_factor=gradient_predivide_factor,
        num_groups=num_groups, groups=groups, process_set=process_set,
        scale_local_gradients=scale_local_gradients)
    return _taking_keras_3_variables(tape)


def _check_tape(gradtape: Any) -> None:
    if not isinstance(gradtape, tf.GradientTape):
        raise ArgumentTypeError(with_fix(
            f"`gradtape` must be a tf.GradientTape, got {type(gradtape).__module__}.{type(gradtape).__name__}",
            "pass the tape of `with tf.GradientTape() as tape: ...`, after the block: "
            "tape = hvd.DistributedGradientTape(tape)"))
    if callable(getattr(gradtape, "register_local_source", None)):  # Horovod's (and so tfdist's) tapes
        raise ArgumentValueError(with_fix(
            "`gradtape` is already a DistributedGradientTape: its gradients would be allreduced twice",
            "wrap the plain tf.GradientTape once"))


def _check_options(hvd: Any, *, compression: Any, op: Any, gradient_predivide_factor: float, num_groups: Any,
                   groups: Any, process_set: Any) -> None:
    """Refuse, naming the argument and the fix, what Horovod would refuse with a bare ValueError or
    fail on later, deep in the first ``tape.gradient``."""
    if not all(callable(getattr(compression, method, None)) for method in ("compress", "decompress")):
        raise ArgumentTypeError(with_fix(f"`compression` must be a Horovod compressor, got {compression!r}",
                                         "pass compression=hvd.Compression.fp16 or hvd.Compression.none"))
    if isinstance(op, bool) or op not in REDUCE_OPS:
        raise ArgumentValueError(with_fix(f"`op` must be one of Horovod's reductions, got {op!r}",
                                          "pass op=hvd.Average (the default) or op=hvd.Sum"))
    if not isinstance(gradient_predivide_factor, (int, float)) or not gradient_predivide_factor > 0:
        raise ArgumentValueError(with_fix(
            f"`gradient_predivide_factor` must be a number > 0, got {gradient_predivide_factor!r}",
            "leave it at 1.0, or pass e.g. the number of ranks"))
    if gradient_predivide_factor != 1.0:
        if op != Average:
            raise ArgumentValueError(with_fix(
                f"`gradient_predivide_factor`={gradient_predivide_factor!r} needs op=hvd.Average, got "
                f"op={REDUCE_OPS[op]}", "leave gradient_predivide_factor at 1.0, or pass op=hvd.Average"))
        if hvd.rocm_built():
            raise ArgumentValueError(with_fix("`gradient_predivide_factor` is not supported by Horovod built "
                                              "with ROCm", "leave gradient_predivide_factor at 1.0"))
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 0:
        raise ArgumentValueError(with_fix(f"`num_groups` must be an integer >= 0, got {num_groups!r}",
                                          "leave it at 0, or pass groups=2 (num_groups is deprecated)"))
    if isinstance(groups, (list, tuple)):
        if not all(isinstance(group, (list, tuple)) for group in groups):
            raise ArgumentTypeError(with_fix(
                "`groups` as a list must hold lists of variables", "pass e.g. groups=[[v1, v2], [v3]], or groups=2"))
    elif groups is not None and (isinstance(groups, bool) or not isinstance(groups, int) or groups < 1):
        raise ArgumentValueError(with_fix(f"`groups` must be an integer > 0 or lists of variables, got {groups!r}",
                                          "pass e.g. groups=2, or leave groups=None (one allreduce per gradient)"))
    if not isinstance(process_set, ProcessSet):
        raise ArgumentTypeError(with_fix(f"`process_set` must be a Horovod ProcessSet, got {process_set!r}",
                                         "pass hvd.global_process_set (the default) or one of hvd.add_process_set"))


def _taking_keras_3_variables(tape: Any) -> Any:
    """Horovod's distributed ``tape``, its three methods that take variables fed the ``tf.Variable`` of
    each Keras 3 one. Instance attributes over Horovod's methods: Horovod's own methods call
    ``super(self.__class__, self)``, which a subclass would send round in a loop."""
    horovod_gradient = tape.gradient
    horovod_register = tape.register_local_source
    horovod_split = tape.get_local_and_global_gradients

    def gradient(target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: Any = tf.UnconnectedGradients.NONE, use_generic_names: bool = False) -> Any:
        """The gradients of ``target`` with respect to ``sources``, averaged over the ranks (Horovod's
        ``gradient``), in the structure of ``sources``."""
        fill = _unconnected(unconnected_gradients)
        flat = tf.nest.flatten(sources)
        variables = tf_variables(flat, "sources")
        grads = horovod_gradient(target, variables, output_gradients=output_gradients,
                                 use_generic_names=use_generic_names)
        if fill == tf.UnconnectedGradients.ZERO:  # the same on every rank: the graph is
            grads = [tf.zeros_like(v) if g is None else g for v, g in zip(variables, grads)]
        return tf.nest.pack_sequence_as(sources, grads)

    def register_local_source(source: Any) -> None:
        """Keep ``source``'s gradient local (not allreduced), as Horovod's method does."""
        horovod_register(tf_variable(source, "source"))

    def get_local_and_global_gradients(target: Any, sources: Any, output_gradients: Any = None,
                                       use_generic_names: bool = False) -> tuple[list, list]:
        """``(local, global)`` lists of ``(source, gradient)`` pairs, as Horovod's method returns them."""
        flat = list(sources)
        variables = tf_variables(flat, "sources")
        originals = {variable.ref(): source for variable, source in zip(variables, flat)}
        local, averaged = horovod_split(target, variables, output_gradients=output_gradients,
                                        use_generic_names=use_generic_names)
        return ([(originals[v.ref()], g) for v, g in local], [(originals[v.ref()], g) for v, g in averaged])

    tape.gradient = gradient
    tape.register_local_source = register_local_source
    tape.get_local_and_global_gradients = get_local_and_global_gradients
    return tape


def _unconnected(value: Any) -> tf.UnconnectedGradients:
    try:
        return tf.UnconnectedGradients(value)
    except ValueError:
        raise ArgumentValueError(with_fix(f"`unconnected_gradients` must be 'none' or 'zero', got {value!r}",
                                          "pass tf.UnconnectedGradients.NONE (the default) or .ZERO")) from None
