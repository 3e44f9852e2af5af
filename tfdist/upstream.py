"""Every private TensorFlow / tf-keras / Keras 3 attribute tfdist touches (and Horovod's three), behind one door.

tfdist needs a few things that TensorFlow 2.21 and tf-keras 2.21 keep private (the pinned versions
in ``constraints.txt``). Each accessor here reads or calls exactly one of them and *fails closed*:
if the attribute moved or changed type in another release, it raises ``UpstreamChangedError``
naming the attribute, instead of silently doing nothing. ``tests/test_upstream.py`` pins every
accessor against the installed versions, so an upgrade that breaks one shows up as one red test.

Importing this module imports neither TensorFlow nor Keras; the accessors take the objects. The two
patches of Horovod's launcher (its build checks, its shutdown signals) fail closed the other way: when
Horovod changed, they leave it untouched and return ``None``, since Horovod's own code is then the safe
behaviour; so does the lookup of TensorFlow's C++ log level (``absl_min_log_level``), which only quiets logs,
the look for unseeded shuffles (``unseeded_shuffles``), which only warns, and the keeping of a parameter-server
chief's functions (``keep_functions_registered``), whose removal by TensorFlow is right, only slow.
"""
from __future__ import annotations

import functools
import os
import re
import sys
from typing import Any, Callable

from tfdist.errors import ArgumentValueError, TfdistError, with_fix
from tfdist.keras_flavour import KERAS_3, flavour_of

PINNED = "TensorFlow 2.21 / tf-keras 2.21 / Keras 3.15"

#: The methods Keras' CallbackList calls to learn whether a callback has batch-level hooks.
BATCH_HOOK_CHECKS = ("_implements_train_batch_hooks", "_implements_test_batch_hooks",
                     "_implements_predict_batch_hooks")


class UpstreamChangedError(TfdistError, RuntimeError):
    """A private TensorFlow/Keras attribute tfdist relies on is missing or has another type."""


def _missing(owner: Any, attribute: str) -> UpstreamChangedError:
    return UpstreamChangedError(with_fix(
        f"{type(owner).__module__}.{type(owner).__name__} has no usable `{attribute}`, which tfdist "
        f"relies on (tested with {PINNED})",
        "install the versions pinned in tfdist's constraints.txt, or report this with your "
        "TensorFlow and Keras versions"))


def _get(owner: Any, attribute: str) -> Any:
    try:
        return getattr(owner, attribute)
    except AttributeError:
        raise _missing(owner, attribute) from None


# --- models ---------------------------------------------------------------------------------------
def steps_per_execution(model: Any) -> int:
    """The steps a compiled tf-keras model runs per ``tf.function`` call (``model._steps_per_execution``)."""
    variable = _get(model, "_steps_per_execution")
    if variable is None or not hasattr(variable, "numpy"):
        raise _missing(model, "_steps_per_execution")
    return int(variable.numpy())


def steps_per_execution_if_compiled(model: Any) -> int | None:
    """As ``steps_per_execution``, or None for a tf-keras model never compiled (its
    ``_steps_per_execution`` is still None: a custom loop's model, whose every call is one step)."""
    if _get(model, "_steps_per_execution") is None:
        return None
    return steps_per_execution(model)


def set_steps_per_execution(model: Any, steps: int) -> None:
    """Change a compiled model's steps per execution (``model._configure_steps_per_execution``)."""
    configure = _get(model, "_configure_steps_per_execution")
    if not callable(configure):
        raise _missing(model, "_configure_steps_per_execution")
    configure(steps)


# --- callbacks ------------------------------------------------------------------------------------
def has_batch_hooks(callback: Any) -> bool:
    """Whether Keras calls ``callback`` every batch (its ``_implements_*_batch_hooks``)."""
    checks = [_get(callback, name) for name in BATCH_HOOK_CHECKS]
    if not all(callable(check) for check in checks):
        raise _missing(callback, "_implements_*_batch_hooks")
    return any(bool(check()) for check in checks)


def refused_by_parameter_servers(callback: Any) -> bool:
    """Whether tf-keras refuses ``callback`` under ParameterServerStrategy: batch hooks that need
    numpy logs (callbacks with ``_supports_tf_logs``, e.g. TensorBoard, take remote values)."""
    # tf-keras reads the flag with this same default (absent means False), so absence is not a change.
    if getattr(callback, "_supports_tf_logs", False):
        return False
    return has_batch_hooks(callback)


# --- optimizers -----------------------------------------------------------------------------------
def optimizer_is_built(optimizer: Any) -> bool:
    """Whether an optimizer has created its slot variables: tf-keras' private ``optimizer._built``
    (which tf-keras itself reads as False until ``build`` sets it), Keras 3's public ``built``."""
    if not callable(getattr(optimizer, "build", None)):
        raise _missing(optimizer, "build")
    attribute = "built" if flavour_of(optimizer) == KERAS_3 else "_built"
    built = getattr(optimizer, attribute, False)
    if not isinstance(built, bool):
        raise _missing(optimizer, attribute)
    return built


def raw_learning_rate(optimizer: Any) -> Any:
    """The learning rate as given: a float variable or a ``LearningRateSchedule``
    (``optimizer._learning_rate`` in tf-keras and Keras 3; the public property reads a schedule's
    current value). A ``LossScaleOptimizer`` (either Keras) answers for its inner optimizer,
    whose rate it reads and sets."""
    inner = loss_scale_inner(optimizer)
    return _get(optimizer if inner is None else inner, "_learning_rate")


# --- tf.distribute's ClusterCoordinator -------------------------------------------------------------
#: The method of a coordinator's per-worker dispatcher that runs one closure (one scheduled step
#: function) on its worker and waits for the result; its thread calls it once per closure.
PROCESS_CLOSURE = "_process_closure"


def coordinator_workers(coordinator: Any) -> list:
    """The ClusterCoordinator's per-worker dispatchers (``coordinator._cluster.workers``), one per
    worker task, each with its ``worker_index`` and a thread calling ``_process_closure``."""
    workers = _get(_get(coordinator, "_cluster"), "workers")
    if not isinstance(workers, list):
        raise _missing(coordinator, "_cluster.workers")
    for worker in workers:
        if not isinstance(getattr(worker, "worker_index", None), int):
            raise _missing(worker, "worker_index")
        if not callable(getattr(worker, PROCESS_CLOSURE, None)):
            raise _missing(worker, PROCESS_CLOSURE)
    return workers


def time_closures(worker: Any, record: Any) -> Any:
    """Make ``worker`` (from ``coordinator_workers``) call ``record(seconds)`` after each closure it
    runs, timed from dispatch to its result on the coordinator. Returns a function that undoes it."""
    run = _get(worker, PROCESS_CLOSURE)

    def timed(closure: Any) -> Any:
        import time

        start = time.perf_counter()
        try:
            return run(closure)
        finally:
            record(time.perf_counter() - start)

    setattr(worker, PROCESS_CLOSURE, timed)
    return lambda: vars(worker).pop(PROCESS_CLOSURE, None)


#: Name prefixes of the ClusterCoordinator's daemon threads: its failure handler and one closure loop per
#: worker (TensorFlow names them so in cluster_coordinator.py).
COORDINATOR_THREADS = ("WorkerPreemptionHandler", "WorkerClosureProcessingLoop-")


def stop_coordinator(strategy: Any, timeout: float) -> list[str]:
    """Stop the ClusterCoordinator of tf.distribute ``strategy`` (``strategy._cluster_coordinator``;
    none made yet: nothing to do) with its own ``_cluster.stop()``, then wait up to ``timeout`` seconds
    for its threads to end. Returns the names of those still running.

    A daemon thread that returns from TensorFlow's C++ after the interpreter began to finalize is
    ended with a forced unwind, which a C++ ``catch (...)`` turns into ``terminate called ... FATAL:
    exception not rethrown`` and SIGABRT: a chief that trained to the end would exit 134.
    """
    import threading
    import time

    coordinator = getattr(strategy, "_cluster_coordinator", None)
    if coordinator is None:
        return []
    stop = _get(_get(coordinator, "_cluster"), "stop")
    deadline = time.monotonic() + timeout
    # In a thread of its own: stop() takes the failure handler's lock, which that handler holds while it
    # waits in C++ for a lost task to come back; the exit must not wait longer than ``timeout`` for it.
    stopper = threading.Thread(target=stop, name="tfdist-stop-coordinator", daemon=True)
    stopper.start()
    stopper.join(timeout)
    running = [t for t in threading.enumerate() if t.daemon and t.name.startswith(COORDINATOR_THREADS)]
    for thread in running:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in running if t.is_alive()]


# --- Horovod's tf-keras optimizer wrapper ---------------------------------------------------------
def horovod_tf_keras_optimizer(optimizer: Any, *, op: Any, gradient_predivide_factor: float = 1.0,
                               num_groups: int = 0, groups: Any = None, **options: Any) -> Any:
    """Horovod's ``DistributedOptimizer`` around the tf-keras ``optimizer``, made as
    ``horovod.tensorflow.keras.DistributedOptimizer`` makes it (its checks of ``op``, ``groups`` and
    ``gradient_predivide_factor``, as ArgumentValueError naming the field, then
    ``horovod._keras.create_distributed_optimizer``); ``options``:
    that function's other keyword arguments (``name``, ``compression``, ``process_set``, ...).

    Importing ``horovod.tensorflow.keras`` imports Keras 3 as well (``from keras import backend``),
    about a CPU-second of every tf-keras rank's start-up spent on a Keras it never uses.
    """
    import warnings

    import horovod.tensorflow as hvd
    import tf_keras

    try:
        import horovod._keras as horovod_keras
    except ImportError:
        raise _missing(hvd, "_keras") from None
    create = _get(horovod_keras, "create_distributed_optimizer")
    if gradient_predivide_factor != 1.0 and hvd.rocm_built():
        raise ArgumentValueError(with_fix("`gradient_predivide_factor` is not supported by Horovod built with ROCm",
                                          "leave gradient_predivide_factor at 1.0"))
    if op != hvd.Average and op != hvd.Sum:
        raise ArgumentValueError(with_fix(f"`op`={op!r} is not supported by Horovod's DistributedOptimizer",
                                          "pass op=hvd.Average (the default) or op=hvd.Sum"))
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ArgumentValueError(with_fix(f"`groups` must be an integer > 0 or a list of lists of variables, "
                                          f"got {groups!r}", "pass e.g. groups=2, or leave groups=None"))
    wrapped = create(keras=tf_keras, optimizer=optimizer, op=op, gradient_predivide_factor=gradient_predivide_factor,
                     groups=groups, **options)
    return allreduce_on_every_path(wrapped)


def rebuild_horovod_allreduce(wrapped: Any, *, compression: Any, sparse_as_dense: bool, op: Any,
                              gradient_predivide_factor: float, groups: Any, device_dense: str, device_sparse: str,
                              process_set: Any) -> None:
    """Give Horovod's tf-keras ``wrapped`` optimizer a new gradient allreduce (its ``_allreduce_grads``,
    which Horovod builds once, in ``__init__``, as a ``tf.function`` over these arguments), so that the
    next trace of the train step allreduces with ``compression``. Refused when Horovod's accumulation
    helper (``_agg_helper``) holds the old one."""
    import horovod.tensorflow as hvd

    make = _get(hvd, "_make_allreduce_grads_fn")
    if not callable(make) or not callable(_get(wrapped, "_allreduce_grads")):
        raise _missing(wrapped, "_allreduce_grads")
    if _get(wrapped, "_agg_helper") is not None:
        raise _missing(wrapped, "_agg_helper (None: no local accumulation)")
    name = _get(wrapped, "_name")
    wrapped._allreduce_grads = make(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                    gradient_predivide_factor, groups,
                                    process_set=hvd.global_process_set if process_set is None else process_set)


def replace_horovod_allreduce(wrapped: Any, allreduce: Any) -> None:
    """Give Horovod's tf-keras ``wrapped`` optimizer ``allreduce(grads, variables)`` as its gradient
    allreduce (``_allreduce_grads``, which its ``_allreduce`` calls with the gradients and variables of
    every update): tfdist's own (PowerSGD). Refused when Horovod's accumulation helper holds the old one."""
    if not callable(_get(wrapped, "_allreduce_grads")):
        raise _missing(wrapped, "_allreduce_grads")
    if _get(wrapped, "_agg_helper") is not None:
        raise _missing(wrapped, "_agg_helper (None: no local accumulation)")
    wrapped._allreduce_grads = allreduce


#: Horovod's tf-keras wrapper sets this flag in ``_allreduce``, the method that averages the gradients.
ALLREDUCED_FLAG = "_aggregated_gradients"


def allreduce_on_every_path(wrapped: Any) -> Any:
    """Make Horovod's tf-keras ``wrapped`` optimizer allreduce gradients however they reach it.

    Horovod allreduces in ``compute_gradients`` only (what ``fit`` and ``minimize`` call): a custom
    loop that takes ``tape.gradient`` and calls ``apply_gradients`` updated each rank with its own
    gradients, and the ranks drifted apart without a word (horovod#2001, #3058). Here
    ``apply_gradients``, and the aggregation hook a ``LossScaleOptimizer`` calls before its finite
    test (``aggregate_gradients``; ``_aggregate_gradients`` on legacy optimizers), allreduce the
    gradients unless ``compute_gradients`` already did since the last update (Horovod's
    ``_aggregated_gradients`` flag, which its ``_allreduce`` sets and ``apply_gradients`` here clears).
    The flag is read when the step is traced or run eagerly, the order in which both calls happen.
    """
    allreduce = _get(wrapped, "_allreduce")
    if not callable(allreduce) or not isinstance(getattr(wrapped, ALLREDUCED_FLAG, None), bool):
        raise _missing(wrapped, f"_allreduce / {ALLREDUCED_FLAG}")
    hook = "aggregate_gradients" if callable(getattr(wrapped, "aggregate_gradients", None)) else "_aggregate_gradients"
    aggregate = _get(wrapped, hook)
    apply = _get(wrapped, "apply_gradients")

    def allreduced(grads_and_vars: Any) -> list:
        pairs = list(grads_and_vars)
        if getattr(wrapped, ALLREDUCED_FLAG) or not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(allreduce(grads, variables), variables))

    def aggregate_gradients(grads_and_vars: Any) -> Any:
        return aggregate(allreduced(grads_and_vars))

    def apply_gradients(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return apply(allreduced(grads_and_vars), *args, **kwargs)
        finally:
            setattr(wrapped, ALLREDUCED_FLAG, False)

    setattr(wrapped, hook, aggregate_gradients)
    wrapped.apply_gradients = apply_gradients
    return wrapped


# --- tensorflow's lazy tf.keras loader --------------------------------------------------------------
def tf_uses_legacy_keras(tensorflow: Any) -> bool | None:
    """What TensorFlow decided ``tf.keras`` is at import (``tensorflow._tf_uses_legacy_keras``);
    ``None`` for a TensorFlow without the flag (older than 2.16, always Keras 2)."""
    value = getattr(tensorflow, "_tf_uses_legacy_keras", None)
    if value is not None and not isinstance(value, bool):
        raise _missing(tensorflow, "_tf_uses_legacy_keras")
    return value


def lazy_keras_version(loader: Any) -> tuple[bool, str | None]:
    """``(still_lazy, version)`` of TensorFlow's ``KerasLazyLoader`` behind ``tf.keras``, read
    without triggering the import (``_tfll_initialized``, ``_tfll_keras_version``); ``(False, None)``
    once the loader replaced itself with the real module."""
    try:
        state = vars(loader)
    except TypeError:
        return False, None
    if "_tfll_initialized" not in state:
        return False, None
    return True, state.get("_tfll_keras_version")


# --- mixed precision and gradient accumulation (tfdist.runtime.allreduce) -------------------------
def loss_scale_inner(optimizer: Any) -> Any:
    """The optimizer a tf-keras or Keras 3 ``LossScaleOptimizer`` wraps (its public
    ``inner_optimizer``), or ``None`` when ``optimizer`` is not a loss-scale optimizer."""
    names = [cls.__name__ for cls in type(optimizer).__mro__]
    if not any(name.startswith("LossScaleOptimizer") for name in names):
        return None
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is None or not callable(getattr(inner, "apply_gradients", None)):
        raise _missing(optimizer, "inner_optimizer")
    return inner


def self_and_inner(optimizer: Any) -> list:
    """``[optimizer]``, and after it, for a loss-scale optimizer, the one it wraps (:func:`loss_scale_inner`:
    a loss-scale optimizer without its ``inner_optimizer`` raises, never passes for a plain one)."""
    inner = loss_scale_inner(optimizer)
    return [optimizer] if inner is None else [optimizer, inner]


#: The Keras 3 optimizer method that clips the gradients of an update; with
#: ``gradient_accumulation_steps`` it runs once per update, on the mean of the accumulated ones.
CLIP_GRADIENTS = "_clip_gradients"


def clip_gradients(optimizer: Any) -> Any:
    """A Keras 3 optimizer's bound ``_clip_gradients(grads)`` (see ``CLIP_GRADIENTS``), which its
    ``_backend_apply_gradients`` calls on every update's gradients and only there."""
    method = _get(optimizer, CLIP_GRADIENTS)
    if not callable(method) or not callable(getattr(optimizer, "_backend_apply_gradients", None)):
        raise _missing(optimizer, CLIP_GRADIENTS)
    return method


def replace_clip_gradients(optimizer: Any, function: Any) -> None:
    """Make ``function`` this optimizer's ``_clip_gradients`` (an instance attribute over the class's
    method, checked to exist first); :func:`restore_clip_gradients` undoes it."""
    clip_gradients(optimizer)
    setattr(optimizer, CLIP_GRADIENTS, function)


def restore_clip_gradients(optimizer: Any) -> None:
    """Undo :func:`replace_clip_gradients` (nothing to do if it was not replaced)."""
    vars(optimizer).pop(CLIP_GRADIENTS, None)


def replace_keras3_gradient_sum(optimizer: Any, function: Any) -> None:
    """Make ``function`` (``(gradient, variable)`` pairs in replica context -> pairs) a Keras 3
    optimizer's ``_all_reduce_sum_gradients``: the TensorFlow backend's optimizer
    (keras/src/backend/tensorflow/optimizer.py) sums a step's gradients over a tf.distribute strategy's
    replicas there, in ``_backend_update_step``, and only there. An instance attribute over the class's
    method, checked to exist first."""
    method = _get(optimizer, "_all_reduce_sum_gradients")
    if not callable(method) or not callable(getattr(optimizer, "_backend_update_step", None)):
        raise _missing(optimizer, "_all_reduce_sum_gradients")
    optimizer._all_reduce_sum_gradients = function


# --- the eager context's functions --------------------------------------------------------------------------
def keep_functions_registered() -> list[str] | None:
    """From now on in this process, a function that the eager context would remove
    (``Context.remove_function``, which ``AtomicFunction.__del__`` calls as the last reference to a traced
    function goes) stays registered instead. Returns the list of their names, filled as it goes (the
    same list on every call: the first call installs it); ``None``, TensorFlow left as it is, where its
    ``Context.remove_function`` is not there to replace.

    Why: on a parameter-server coordinator the removal also deregisters the function on every task,
    one blocking RPC at a time (tf.distribute turns off the eager client's streaming enqueue), in a
    C++ call that holds the GIL, and on the network lab one such call often took 40 s: as ``fit``
    returned (a per-worker dataset's ``_remote_finalize_func``, 39 s; 8 of 14 fixed runs stalled 19-60
    s there), and, with only fit's removals kept, at the chief's exit (a train step's
    ``cond_cond_true_187``, 42 s, 2 runs of 3). A lab fit of 12 epochs left 7 functions registered (a
    few KB each, on every task) until the process ends. The price: code on the chief that removes a
    function to register another under the same name (freezing a graph for TFLite or TF-TRT) may be
    refused by TensorFlow as a different function of that name."""
    from tensorflow.python.eager import context

    current = getattr(context.Context, "remove_function", None)
    kept = getattr(current, "tfdist_kept", None)
    if isinstance(kept, list):
        return kept
    if not callable(current):
        return None
    names: list[str] = []

    def keep(self: Any, name: Any) -> None:
        names.append(name.decode() if isinstance(name, bytes) else str(name))

    keep.tfdist_kept = names  # type: ignore[attr-defined]
    keep.tfdist_original = current  # type: ignore[attr-defined]
    context.Context.remove_function = keep
    return names


# --- datasets --------------------------------------------------------------------------------------------
def unseeded_shuffles(dataset: Any) -> int | None:
    """How many shuffles of ``dataset``'s pipeline (its inputs, followed back with tf.data's private
    ``_inputs()``; not the datasets that functions build, as in ``interleave``) have no seed: neither an
    op seed nor a global one (``_ShuffleDataset._seed`` and ``_seed2`` both 0), so that every process
    building the pipeline shuffles in an order of its own. A seed that is not an eager tensor counts
    as a seed. ``None`` where tf.data's ``_inputs()`` or a shuffle's seeds are not there to read (it
    only warns)."""
    found, seen, pending = 0, set(), [dataset]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if type(current).__name__ == "_ShuffleDataset":
            seeds = (getattr(current, "_seed", None), getattr(current, "_seed2", None))
            if any(seed is None for seed in seeds):
                return None
            try:
                found += all(int(seed.numpy()) == 0 for seed in seeds)
            except (AttributeError, TypeError, ValueError):  # symbolic: built inside a function
                pass
        inputs = getattr(current, "_inputs", None)
        if not callable(inputs):
            return None
        pending.extend(inputs())
    return found


# --- models, for strategy.export ---------------------------------------------------------------------
def is_graph_network(model: Any) -> bool:
    """Whether a model is Functional or Sequential (its inputs are known and it can be cloned):
    tf-keras' private ``model._is_graph_network``; Keras 3's ``keras.src.models.functional.Functional``
    (which ``keras.Sequential`` is not: a built Sequential counts by its public ``inputs``)."""
    if flavour_of(model) == KERAS_3:
        try:
            from keras.src.models.functional import Functional
            from keras import Sequential
        except ImportError:
            raise _missing(model, "keras.src.models.functional.Functional") from None
        if isinstance(model, Sequential):
            try:
                return bool(model.inputs)
            except (AttributeError, ValueError):
                return False
        return isinstance(model, Functional)
    value = _get(model, "_is_graph_network")
    if not isinstance(value, bool):
        raise _missing(model, "_is_graph_network")
    return value


def keras3_tf_variable(variable: Any) -> Any:
    """The ``tf.Variable`` a Keras 3 variable of the TensorFlow backend keeps its value in
    (``variable._value``; its public ``value`` is that variable cast to the layer's compute dtype inside
    a mixed-precision layer call), or ``None`` while it is not initialised. What Horovod's
    ``DistributedGradientTape`` and ``broadcast_variables`` need: they call ``.ref()`` and ``.assign``,
    which only a ``tf.Variable`` has (horovod#4290)."""
    import tensorflow as tf

    value = _get(variable, "_value")
    if value is not None and not isinstance(value, tf.Variable):
        raise _missing(variable, "_value")
    return value


def count_keras3_steps_atomically(optimizer: Any) -> None:
    """Make a Keras 3 optimizer count its steps with one atomic add on its ``tf.Variable``.

    ``BaseOptimizer.apply`` ends with ``self._iterations.assign_add(1)``, which a Keras 3 variable does
    as ``self.assign(self + value)`` (keras/src/backend/common/variables.py): a read, then a write. Under
    parameter servers the workers' steps run at once against the one variable on a ps task, and the
    increments that interleave are lost (147 of 168 steps counted on 2 workers), while learning-rate
    schedules and Adam's bias correction read the count. Here the optimizer's counter (``_iterations``)
    adds with ``tf.Variable.assign_add`` instead, one AssignAddVariableOp on the ps."""
    counter = _get(optimizer, "_iterations")
    variable = keras3_tf_variable(counter)
    if variable is None:
        raise _missing(optimizer, "_iterations")

    def assign_add(value: Any) -> Any:
        import tensorflow as tf

        return variable.assign_add(tf.cast(value, variable.dtype))

    counter.assign_add = assign_add


def keras3_build_shapes(model: Any) -> dict | None:
    """The input shapes a Keras 3 model was built or first called with (``model._build_shapes_dict``,
    which Keras 3's own export reads for subclassed models); ``None`` when it was never built."""
    shapes = _get(model, "_build_shapes_dict")
    if shapes is not None and not isinstance(shapes, dict):
        raise _missing(model, "_build_shapes_dict")
    return dict(shapes) if shapes else None


def build_keras3_from_a_local_batch(model: Any) -> None:
    """Have a Keras 3 model's ``fit``/``evaluate`` under MultiWorkerMirroredStrategy build it from this
    worker's first batch instead of the job's mean batch.

    Keras 3's ``Trainer._maybe_symbolic_build`` (keras/src/backend/tensorflow/trainer.py) reduces the
    first distributed batch with an eager ``strategy.reduce("MEAN", batch, axis=None)`` of the whole
    ``(x, y)`` tuple; MultiWorkerMirroredStrategy's reduce takes one value, not a tuple, and fails with
    "Attempt to convert a value (PerReplica...) with an unsupported type" (keras-team/keras#20585). The
    build needs only the batch's shapes and dtypes, which every replica's batch has, so the method is
    replaced on ``model`` with one that reads this worker's first replica and calls
    ``model._symbolic_build`` as Keras does. Fails closed when either method, or the epoch iterator's
    ``(begin, end, iterator)`` steps it walks, changed."""
    import types

    import tensorflow as tf

    for attribute in ("_maybe_symbolic_build", "_symbolic_build"):
        if not callable(getattr(type(model), attribute, None)):
            raise _missing(model, attribute)

    def first_local(value: Any) -> Any:
        if isinstance(value, tf.distribute.DistributedValues):
            return model.distribute_strategy.experimental_local_results(value)[0]
        return value

    def maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> None:
        if iterator is not None:
            for step in iterator:
                if not (isinstance(step, tuple) and len(step) == 3):
                    raise _missing(iterator, "__iter__ yielding (begin, end, iterator)")
                data_batch = tf.nest.map_structure(first_local, next(step[2]))
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    model._maybe_symbolic_build = types.MethodType(maybe_symbolic_build, model)


# --- horovodrun's build check (tfdist.launch.horovod_launcher) --------------------------------------
#: The build checks ``horovod.runner.launch`` imported from ``horovod.common.util`` and calls before it
#: starts a job: ``run_controller`` (``gloo_built`` with --gloo, ``mpi_built`` then ``gloo_built``
#: without) and ``_run_elastic`` (``gloo_built``). Each forks a child that imports ``horovod.tensorflow``.
HOROVOD_BUILD_CHECKS = ("gloo_built", "mpi_built")


def answer_horovod_build_checks(answer: Callable[[str, Callable[..., Any], bool], Any],
                                ) -> Callable[[], None] | None:
    """Make ``horovod.runner.launch.gloo_built(verbose=...)`` / ``mpi_built`` return
    ``answer(name, original, verbose)``, ``original`` being Horovod's own check. Returns a function that
    undoes it, or ``None`` when Horovod was left untouched (its own checks run): fails closed unless every
    name of ``HOROVOD_BUILD_CHECKS`` in ``horovod.runner.launch`` is still ``horovod.common.util``'s function.
    Importing ``horovod.runner.launch`` imports no TensorFlow."""
    try:
        import horovod.common.util as util
        import horovod.runner.launch as launch
    except ImportError:
        return None
    originals = {}
    for name in HOROVOD_BUILD_CHECKS:
        current = getattr(launch, name, None)
        if not callable(current) or current is not getattr(util, name, None):
            return None
        originals[name] = current

    def replacement(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def check(verbose: bool = False) -> Any:
            return answer(name, original, verbose)

        check.__name__ = check.__qualname__ = name
        return check

    for name, original in originals.items():
        setattr(launch, name, replacement(name, original))

    def undo() -> None:
        for name, original in originals.items():
            setattr(launch, name, original)

    return undo


# --- horovodrun's shutdown signals (tfdist.launch.horovod_launcher) ----------------------------------
#: The signals ``horovod.runner.gloo_run.register_shutdown_event`` sets its Event on.
HOROVOD_SHUTDOWN_SIGNALS = ("SIGINT", "SIGTERM")


SignalHandler = Callable[[int, Any], None]


def guard_horovod_shutdown_signals(once: Callable[[SignalHandler], SignalHandler]) -> Callable[[], None] | None:
    """Make ``horovod.runner.gloo_run.register_shutdown_event`` (which ``launch_gloo`` and
    ``launch_gloo_elastic`` call before they start the ranks) install ``once(handler)`` instead of its bare
    handler: the same Event, set on SIGINT or SIGTERM, by a handler that a second signal cannot re-enter.

    Horovod 0.28.1's handler calls ``threading.Event.set``; a second SIGTERM arriving while the first
    handler held the Event's lock (a parent-death signal sent more than once: ``tfdist.launch.processes``)
    ran the handler again inside it, and horovodrun's main thread waited for its own lock: horovodrun and
    its ranks outlived the launcher. Returns a function that undoes it, or ``None`` when Horovod was left
    untouched: fails closed unless ``register_shutdown_event`` is still ``gloo_run``'s own function and
    names exactly the signals of ``HOROVOD_SHUTDOWN_SIGNALS``."""
    import signal
    import threading

    try:
        import horovod.runner.gloo_run as gloo_run
    except ImportError:
        return None
    original = getattr(gloo_run, "register_shutdown_event", None)
    if not callable(original) or getattr(original, "__module__", None) != gloo_run.__name__:
        return None
    code = getattr(original, "__code__", None)
    named = {name for name in getattr(code, "co_names", ()) if name.startswith("SIG")}
    if named != set(HOROVOD_SHUTDOWN_SIGNALS):  # another release handles other signals: keep its own
        return None

    def register_shutdown_event() -> threading.Event:
        event = threading.Event()
        handler = once(lambda signum, frame: event.set())
        for name in HOROVOD_SHUTDOWN_SIGNALS:
            signal.signal(getattr(signal, name), handler)
        return event

    gloo_run.register_shutdown_event = register_shutdown_event

    def undo() -> None:
        gloo_run.register_shutdown_event = original

    return undo


# --- TensorFlow's C++ log level (tfdist.tf_noise) -----------------------------------------------------
_ABSL_NAMESPACE = rb"_ZN4absl(?:12lts_\d{8})?"  # absl's inline namespace: `lts_20250814` in TensorFlow 2.21
_ABSL_GET_MIN = _ABSL_NAMESPACE + rb"11MinLogLevelEv(?=\x00)"
_ABSL_SET_MIN = _ABSL_NAMESPACE + rb"14SetMinLogLevelENS0_18LogSeverityAtLeastE(?=\x00)"


@functools.lru_cache(maxsize=1)
def absl_min_log_level() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """absl's ``MinLogLevel``/``SetMinLogLevel`` in the TensorFlow this process has loaded (the level
    ``TF_CPP_MIN_LOG_LEVEL`` sets at import). TensorFlow has no Python API for it; the functions are
    found by their mangled names in ``libtensorflow_framework``, whatever absl's inline namespace
    (``lts_20250814`` in TensorFlow 2.21). ``None`` when TensorFlow is not loaded or they moved: then
    nothing is quieted (noise only, so this fails open: TensorFlow logs as it did)."""
    import ctypes
    import mmap
    from pathlib import Path

    tf = sys.modules.get("tensorflow")
    if tf is None or not getattr(tf, "__file__", None):
        return None
    for library in sorted(Path(tf.__file__).parent.glob("libtensorflow_framework.so*")):
        try:
            handle = ctypes.CDLL(str(library), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # only if loaded
            with open(library, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                found = [re.search(pattern, data) for pattern in (_ABSL_GET_MIN, _ABSL_SET_MIN)]
                names = [match.group(0).decode() for match in found if match]
            if len(names) != 2:
                continue
            get, set_ = (getattr(handle, name) for name in names)
        except Exception:  # noqa: BLE001  (noise only: whatever fails, TensorFlow logs as it did)
            continue
        get.restype, get.argtypes = ctypes.c_int, []
        set_.restype, set_.argtypes = None, [ctypes.c_int]
        return get, set_
    return None
