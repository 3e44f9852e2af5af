"""A drop-in for ``horovod.tensorflow.keras`` and Horovod's TF2 API, for tf-keras and Keras 3 models alike.

    import tensorflow as tf
    import tfdist.horovod as hvd          # in place of: import horovod.tensorflow.keras as hvd

    hvd.init()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.001 * hvd.size()))
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

Why: Horovod 0.28.1's ``DistributedOptimizer`` hooks ``_aggregate_gradients``, which Keras 3 never
calls, so with a Keras 3 optimizer it trains without ever allreducing (each rank drifts on its own
shard, silently); its callbacks crash on TF 2.21. Here every Keras-level object is handled by the
Keras its class comes from (``tfdist.keras_compat.flavour_of``): tf-keras optimizers get Horovod's
own wrapper, Keras 3 optimizers allreduce in ``apply`` (``tfdist.runtime.allreduce``), and keep
their class, so ``model.save`` and ``load_model`` work.

Which Keras ``tf.keras`` is stays TensorFlow's choice, as for Horovod users: import TensorFlow
first (as Horovod's examples do) and ``TF_USE_LEGACY_KERAS=1`` gives tf-keras, unset gives Keras 3.
(``import tfdist...`` before TensorFlow sets ``TF_USE_LEGACY_KERAS=1`` when unset; ``import keras``
is Keras 3 either way.) For Keras 3, leave ``experimental_run_tf_function`` out of ``compile``.

Custom training loops written for Horovod's TF2 API (``import horovod.tensorflow as hvd``, as in
Horovod's ``examples/tensorflow2/tensorflow2_mnist.py``) change the same one line:

    with tf.GradientTape() as tape:
        loss_value = loss(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape)                   # tfdist.horovod.tape
    grads = tape.gradient(loss_value, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)    # Horovod's example: opt.variables()

``DistributedGradientTape`` is Horovod's own tape, taking Keras 3 variables as well (Horovod's raises
``'Variable' object has no attribute 'ref'`` on them, horovod#4290); ``broadcast_variables`` takes
``tf.Variable``s and the variables of either Keras, eagerly or inside ``tf.function``. A Keras 3
optimizer's ``variables`` is a list, so Horovod's ``opt.variables()`` raises ``TypeError`` there (before
any Horovod code runs): write ``opt.variables``, which tf-keras optimizers take as well.

The framework-neutral names (``init``, ``size``, ``rank``, ``Average``, ``Compression``,
``ProcessSet``, ...) are Horovod's own, re-exported from ``horovod.tensorflow``. ``allreduce``,
``allgather``, ``broadcast`` and ``reducescatter`` serve both APIs: given a tensor-compatible value
(numpy, list, number) they keep the Keras-level contract of ``horovod.tensorflow.keras`` (``name``
names the constant made of it; the eager result tensor); given a TensorFlow tensor or variable (eager,
or symbolic inside ``tf.function``) they are Horovod's TF2 ops, ``name`` naming the op. Their
positional order is the Keras one (``allreduce(value, name, average, ...)``); Horovod's TF2-only
arguments (``device_dense``, ``process_set``, ``ignore_name_scope``, ...) are keyword-only.

Not provided (each raises ``TfdistError`` with the fix when used):

* ``elastic`` (``hvd.elastic.KerasState``, ``run``, its callbacks): use
  ``tfdist.make_strategy('horovod', elastic=True)`` (tf-keras models only);
* ``callbacks.BestModelCheckpoint`` (a helper of ``horovod.spark`` estimators, which set its file
  path): use the model's own Keras ``ModelCheckpoint(..., save_best_only=True)`` on rank 0;
* ``broadcast_global_variables`` exists but refuses: it is TF1 graph-mode only in Horovod; use
  ``callbacks.BroadcastGlobalVariablesCallback`` or ``broadcast_variables``;
* ``load_model(..., legacy_opts=...)``: the optimizer is loaded as saved; a saved legacy tf-keras
  optimizer with state is refused (its state cannot be carried into Horovod's wrapper).

Arguments tfdist cannot honour for an optimizer's Keras are refused, never dropped: ``op=Adasum``
(both Kerases), and on Keras 3 ``groups`` as lists of variables. On Keras 3,
``backward_passes_per_step=k`` becomes the optimizer's ``gradient_accumulation_steps=k`` (one
allreduce per update), and under a ``mixed_float16`` global policy ``DistributedOptimizer`` returns a
``LossScaleOptimizer`` that allreduces the scaled gradients (docs/mixed-precision.md).

Layering: beside ``tfdist.strategies`` (neither imports the other): it may import
:mod:`tfdist.callbacks`, :mod:`tfdist.runtime` and the ground modules. One module per part:
:mod:`tfdist.horovod.callbacks` (``hvd.callbacks.*``), :mod:`tfdist.horovod.tape` (the TF2 tape and the
Keras 3 variable lookup it shares with ``broadcast_variables``), the rest here.
"""
from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import tensorflow as tf
from horovod.tensorflow import (  # noqa: F401  (re-exported: Horovod's framework-neutral API)
    Adasum,
    Average,
    Sum,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from horovod.tensorflow.compression import Compression
from horovod.tensorflow.mpi_ops import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401

from tfdist import upstream
from tfdist.errors import ArgumentTypeError, ArgumentValueError, TfdistError, with_fix
from tfdist.horovod import callbacks  # noqa: F401  (hvd.callbacks.*, as in Horovod)
from tfdist.horovod.tape import DistributedGradientTape, tf_variables  # noqa: F401  (Horovod's TF2 tape)
from tfdist.keras_compat import KERAS_3, PACKAGES, TF_KERAS, flavour_of, keras_module
from tfdist.runtime import allreduce as _allreduce


class NotProvidedError(TfdistError, AttributeError):
    """A part of ``horovod.tensorflow.keras`` that ``tfdist.horovod`` does not provide."""


_NOT_PROVIDED = {
    "elastic": ("`hvd.elastic` (Horovod's elastic Keras state and run loop) is not provided by tfdist.horovod",
                "use tfdist.make_strategy('horovod', elastic=True) and strategy.fit (tf-keras models only)"),
}


def __getattr__(name: str) -> Any:
    if name in _NOT_PROVIDED:
        raise NotProvidedError(with_fix(*_NOT_PROVIDED[name]))
    raise AttributeError(f"module 'tfdist.horovod' has no attribute {name!r}")


def DistributedOptimizer(optimizer: Any, name: str | None = None, device_dense: str = "",
                         device_sparse: str = "", compression: Any = Compression.none,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                         op: Any = Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Any = global_process_set,
                         scale_local_gradients: bool = True) -> Any:
    """``optimizer`` averaging its gradients over the Horovod ranks before every update (Horovod's
    signature). A tf-keras optimizer comes back wrapped by Horovod; a Keras 3 optimizer comes back as
    the same object, allreducing in ``apply``.

    ``groups``: an integer (like ``num_groups``) on both Kerases; lists of variables on tf-keras only.
    ``scale_local_gradients`` acts on variables registered with ``register_local_var``, which only
    Horovod's tf-keras wrapper has; on Keras 3 nothing can be registered, so it has nothing to scale.
    """
    if op not in (Average, Sum):
        raise ArgumentValueError(with_fix(f"`op`={op!r} is not supported by DistributedOptimizer",
                                          "pass op=hvd.Average (the default) or op=hvd.Sum"))
    flavour = flavour_of(optimizer)
    if flavour not in (TF_KERAS, KERAS_3):
        raise ArgumentTypeError(with_fix(
            f"`optimizer` must be a tf-keras or Keras 3 optimizer, got {type(optimizer).__module__}."
            f"{type(optimizer).__name__}", "pass e.g. tf.keras.optimizers.Adam(0.001 * hvd.size())"))
    if groups is not None and not isinstance(groups, int):
        if not isinstance(groups, (list, tuple)):
            raise ArgumentTypeError(with_fix(f"`groups` must be an integer or a list of lists of variables, "
                                             f"got {type(groups).__name__}", "pass e.g. groups=2"))
        if flavour == KERAS_3:
            raise ArgumentValueError(with_fix(
                "`groups` as lists of variables is not available for Keras 3 optimizers in tfdist.horovod "
                "(gradients are grouped by position, not by variable)",
                "pass an integer, e.g. groups=2 (or num_groups=2), or leave groups=None"))
    if isinstance(groups, int) and groups < 0:
        raise ArgumentValueError(with_fix(f"`groups` must be >= 0, got {groups}", "pass groups=None or e.g. 2"))
    if flavour == TF_KERAS and (isinstance(groups, (list, tuple)) or not scale_local_gradients):
        # Options only Horovod's own tf-keras wrapper has; it honours them for tf-keras optimizers.
        return upstream.horovod_tf_keras_optimizer(
            optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
            groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    settings = _allreduce.AllreduceSettings(
        op=op, compression=compression, gradient_predivide_factor=gradient_predivide_factor,
        sparse_as_dense=sparse_as_dense, backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        num_groups=groups if isinstance(groups, int) else num_groups,
        device_dense=device_dense, device_sparse=device_sparse, name=name,
        process_set=None if process_set is global_process_set else process_set)
    return _allreduce.distributed_optimizer(optimizer, settings)


def broadcast_variables(variables: Iterable[Any] | Callable[[], Iterable[Any]], root_rank: int,
                        process_set: Any = global_process_set) -> None:
    """Give every rank ``root_rank``'s values of ``variables``, eagerly or inside ``tf.function``:
    ``tf.Variable``s and the variables of either Keras, a model's (``model.variables``) or an optimizer's
    (``opt.variables``: a list on Keras 3, where ``opt.variables()`` raises ``TypeError``; tf-keras
    optimizers take both, and the method of a legacy tf-keras optimizer is called here)."""
    if callable(variables) and not isinstance(variables, Iterable):
        variables = variables()
    if isinstance(variables, (str, bytes)) or not isinstance(variables, Iterable):
        raise ArgumentTypeError(with_fix(
            f"`variables` must be a list of variables, got {type(variables).__module__}.{type(variables).__name__}",
            "pass model.variables or opt.variables"))
    _allreduce.broadcast_variables(tf_variables(variables, "variables"), root_rank=root_rank,
                                   process_set=None if process_set is global_process_set else process_set)


def broadcast_global_variables(root_rank: int) -> None:
    """Refused: Horovod's version broadcasts TF1 graph-collection variables, which TF2 has not."""
    raise ArgumentValueError(with_fix(
        f"broadcast_global_variables({root_rank!r}) works on TF1 global-variable collections only, "
        "which TF2 models do not use",
        f"pass callbacks.BroadcastGlobalVariablesCallback({root_rank!r}) to fit, or call "
        f"hvd.broadcast_variables(model.variables, root_rank={root_rank!r})"))


def allreduce(value: Any, name: str | None = None, average: bool | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0, op: Any = None,
              compression: Any = Compression.none, *, device_dense: str = "", device_sparse: str = "",
              process_set: Any = global_process_set, ignore_name_scope: bool = False) -> Any:
    """Reduce ``value`` over the ranks (same shape on every rank); ``op`` defaults to Average. A
    TensorFlow tensor, variable or ``IndexedSlices`` (also inside ``tf.function``) goes to Horovod's TF2
    ``allreduce`` as it is; any other value becomes a constant first (Horovod's Keras contract)."""
    import horovod.tensorflow as hvd

    tensor, op_name = _collective_input(value, name)
    return hvd.allreduce(tensor, average=average, device_dense=device_dense, device_sparse=device_sparse,
                         compression=compression, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, name=op_name, process_set=process_set,
                         ignore_name_scope=ignore_name_scope)


def allgather(value: Any, name: str | None = None, *, process_set: Any = global_process_set,
              ignore_name_scope: bool = False) -> Any:
    """Concatenate every rank's value along the first dimension (tensors as in :func:`allreduce`)."""
    import horovod.tensorflow as hvd

    tensor, op_name = _collective_input(value, name)
    return hvd.allgather(tensor, name=op_name, ignore_name_scope=ignore_name_scope, process_set=process_set)


def broadcast(value: Any, root_rank: int, name: str | None = None, *, process_set: Any = global_process_set,
              ignore_name_scope: bool = False) -> Any:
    """``root_rank``'s value, on every rank (tensors as in :func:`allreduce`)."""
    import horovod.tensorflow as hvd

    tensor, op_name = _collective_input(value, name)
    return hvd.broadcast(tensor, root_rank, name=op_name, ignore_name_scope=ignore_name_scope,
                         process_set=process_set)


def reducescatter(value: Any, name: str | None = None, op: Any = Average, *, device_dense: str = "",
                  compression: Any = Compression.none, process_set: Any = global_process_set,
                  ignore_name_scope: bool = False, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> Any:
    """Reduce over the ranks, then give each rank its slice of the first dimension (tensors as in
    :func:`allreduce`)."""
    import horovod.tensorflow as hvd

    tensor, op_name = _collective_input(value, name)
    return hvd.reducescatter(tensor, device_dense=device_dense, compression=compression, op=op, name=op_name,
                             process_set=process_set, ignore_name_scope=ignore_name_scope,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor)


def _collective_input(value: Any, name: Any) -> tuple[Any, str | None]:
    """``(tensor, name of the Horovod op)``: a TensorFlow tensor, variable or ``IndexedSlices`` as it is
    (a Keras 3 variable read into a tensor) with ``name`` for the op, as Horovod's TF2 API takes them;
    any other value made a constant named ``name``, as Horovod's Keras API does."""
    if name is not None and not isinstance(name, str):
        raise ArgumentTypeError(with_fix(
            f"`name` must be a string, got {name!r}: after the value, tfdist.horovod's collectives take "
            "Horovod's Keras order (value, name, ...)", "pass the other arguments by keyword, e.g. average=False"))
    if not tf.is_tensor(value):
        return tf.constant(value, name=name), None
    if not isinstance(value, (tf.Tensor, tf.Variable, tf.IndexedSlices)):
        value = tf.convert_to_tensor(value)
    return value, name


def saved_keras(filepath: Any) -> str:
    """Which Keras saved ``filepath``: ``"keras_3"`` for a ``.keras`` archive whose metadata says
    Keras 3.x, else ``"tf_keras"`` (tf-keras ``.keras`` archives, ``.h5`` files, SavedModel dirs)."""
    path = os.fspath(filepath)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if "metadata.json" in archive.namelist():
                version = str(json.loads(archive.read("metadata.json")).get("keras_version", ""))
                return KERAS_3 if version.split(".", 1)[0] == "3" else TF_KERAS
    return TF_KERAS


def load_model(filepath: Any, custom_optimizers: Sequence[type] | None = None,
               custom_objects: dict | None = None, compression: Any = Compression.none,
               keras: str | None = None) -> Any:
    """Load a saved model with the Keras that saved it, its optimizer made distributed (state kept:
    Keras 3 patches the loaded optimizer in place; tf-keras copies it into Horovod's wrapper).

    ``keras``: ``"tf_keras"`` or ``"keras_3"``; by default read from the file (``saved_keras``): a
    ``.keras`` archive written by Keras 3 loads with Keras 3, anything else with tf-keras.
    """
    flavour = keras if keras is not None else saved_keras(filepath)
    if flavour not in PACKAGES:
        raise ArgumentValueError(with_fix(f"`keras` must be 'tf_keras' or 'keras_3', got {keras!r}",
                                          "leave keras=None to read it from the file"))
    module = keras_module(flavour)
    objects = {cls.__name__: cls for cls in custom_optimizers or ()}
    objects.update(custom_objects or {})
    if flavour == KERAS_3:
        model = module.models.load_model(filepath, custom_objects=objects or None)
        if model.optimizer is not None:
            DistributedOptimizer(model.optimizer, compression=compression)  # in place; class kept
        return model
    model = module.models.load_model(filepath, custom_objects=objects or None)
    optimizer = model.optimizer
    if optimizer is None or type(optimizer).__module__.split(".", 1)[0] == "horovod":
        return model
    model.optimizer = _wrapped_with_state(optimizer, model, compression)
    return model


def _wrapped_with_state(optimizer: Any, model: Any, compression: Any) -> Any:
    """Horovod's wrapper around a loaded tf-keras optimizer, with the loaded state (iterations, slots)
    copied in: the wrapper is a new optimizer built from the config."""
    state = _optimizer_variables(optimizer)
    if state and not hasattr(optimizer, "build"):
        raise ArgumentValueError(with_fix(
            f"the saved {type(optimizer).__name__} is a legacy tf-keras optimizer whose state tfdist.horovod "
            "cannot carry into Horovod's wrapper",
            "load with tf_keras.models.load_model and wrap model.optimizer with hvd.DistributedOptimizer "
            "(its state restarts), or save with a tf_keras.optimizers (non-legacy) optimizer"))
    wrapped = DistributedOptimizer(optimizer, compression=compression)
    if state:
        wrapped.build(model.trainable_variables)
        target = _optimizer_variables(wrapped)
        if [tuple(v.shape) for v in target] != [tuple(v.shape) for v in state]:
            raise ArgumentValueError(with_fix(
                f"the loaded {type(optimizer).__name__}'s state does not match the wrapped optimizer's",
                "load with tf_keras.models.load_model and wrap model.optimizer with hvd.DistributedOptimizer"))
        for variable, value in zip(target, state):
            variable.assign(value)
    return wrapped


def _optimizer_variables(optimizer: Any) -> list:
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


__all__ = [name for name in dir() if not name.startswith("_") and name not in {
    "annotations", "json", "os", "zipfile", "Any", "Callable", "Iterable", "Sequence", "tf", "tape", "tf_variables",
    "TfdistError", "with_fix", "ArgumentTypeError", "ArgumentValueError", "KERAS_3", "PACKAGES", "TF_KERAS", "flavour_of",
    "keras_module", "saved_keras"}]
